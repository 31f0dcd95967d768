"""Which MkDocs config a site is built with: ``--config``, else ``./mkdocs.yml``, else cardgen's own (used as if it
lay in the current directory: its docs dir there, with the assets put in first). The wheel's copy of the defaults
is tested where the wheel is installed (tests/packaging/test_installed.py)."""

from __future__ import annotations

from pathlib import Path

from cardgen.site.config import choose_config, own_config, put_assets

REPO = Path(__file__).resolve().parents[2]


def test_a_given_config_wins_even_over_one_in_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mkdocs.yml").write_text("site_name: here\n")
    assert choose_config(tmp_path / "other.yml").file == tmp_path / "other.yml"
    assert choose_config(tmp_path / "other.yml").docs_dir is None


def test_the_current_directorys_config_is_the_projects(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mkdocs.yml").write_text("site_name: here\n")
    chosen = choose_config(None)
    assert chosen.file.resolve() == tmp_path / "mkdocs.yml" and chosen.docs_dir is None


def test_with_no_config_cardgens_own_is_used_with_its_docs_dir_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    chosen = choose_config(None)
    assert chosen.file == own_config()
    assert chosen.file.read_bytes() == (REPO / "mkdocs.yml").read_bytes()  # one source
    assert chosen.docs_dir == tmp_path.resolve() / "site_src"


def test_assets_are_put_in_and_a_file_already_the_same_is_left_alone(tmp_path):
    docs = tmp_path / "site_src"
    put_assets(own_config(), docs)
    source = REPO / "site_src" / "assets"
    names = sorted(p.relative_to(source) for p in source.rglob("*") if p.is_file())
    assert names and sorted(p.relative_to(docs / "assets") for p in (docs / "assets").rglob("*")) == names
    kept, changed = docs / "assets" / names[0], docs / "assets" / names[-1]
    changed.write_text("edited")
    stamp = kept.stat().st_mtime_ns
    put_assets(own_config(), docs)
    assert kept.stat().st_mtime_ns == stamp
    assert changed.read_bytes() == (source / names[-1]).read_bytes()
