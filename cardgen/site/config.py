"""Which MkDocs config ``cardgen site`` builds with: the project's (``--config``, or ``mkdocs.yml`` in the current
directory) when there is one, else cardgen's own, so that an installed cardgen builds a site from any directory.

cardgen's own is the checkout's top-level ``mkdocs.yml`` and the committed part of its docs dir
(``site_src/assets/``), kept in one place: the wheel carries them as ``cardgen/site/defaults/`` (pyproject's
force-include), an editable install or a source checkout reads them where they are. It is used as if it lay in
the current directory: the docs dir it names (``./site_src/``) receives the generated pages, with the assets
copied there first, exactly as a checkout's does. The docs dir cannot be the installed one: cardgen writes into it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from cardgen.errors import UsageError

CONFIG_NAME = "mkdocs.yml"
ASSETS = "assets"  # the docs dir's committed part: everything else in it is generated (build.GENERATED)
_HERE = Path(__file__).resolve().parent
OWN_CONFIGS = (_HERE / "defaults" / CONFIG_NAME,  # the wheel's copy
               _HERE.parents[1] / CONFIG_NAME)  # the checkout's (an editable install, a source tree)


@dataclass(frozen=True)
class SiteConfig:
    """A MkDocs config file and, for cardgen's own, the docs dir that stands in for its ``docs_dir``."""

    file: Path
    docs_dir: Path | None = None  # absolute; None: the file's own docs_dir


def choose_config(config_file: Path | None) -> SiteConfig:
    """``config_file`` when given (loading says so when it is missing), else ``./mkdocs.yml`` when there is one,
    else cardgen's own with its docs dir under the current directory."""
    if config_file is not None:
        return SiteConfig(Path(config_file))
    if Path(CONFIG_NAME).is_file():
        return SiteConfig(Path(CONFIG_NAME))
    own = own_config()
    return SiteConfig(own, (Path.cwd() / docs_dir_name(own)).resolve())


def own_config() -> Path:
    """cardgen's own ``mkdocs.yml``: the installed package's copy, else the checkout's."""
    for candidate in OWN_CONFIGS:
        if candidate.is_file():
            return candidate
    raise UsageError("this cardgen carries no MkDocs config (an incomplete install): pass one with --config")


def docs_dir_name(config_file: Path) -> str:
    """The ``docs_dir`` a MkDocs config names (MkDocs' default ``docs`` when it names none)."""
    try:
        data = yaml.safe_load(Path(config_file).read_text("utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"MkDocs config {config_file} is not usable: {exc}") from None
    return str(data.get("docs_dir", "docs")) if isinstance(data, dict) else "docs"


def put_assets(config_file: Path, docs_dir: Path) -> None:
    """Copy the committed assets of ``config_file``'s docs dir into ``docs_dir``; a file already the same is
    left alone."""
    source = Path(config_file).parent / docs_dir_name(config_file) / ASSETS
    for path in sorted(source.rglob("*")) if source.is_dir() else []:
        if not path.is_file():
            continue
        target = Path(docs_dir) / ASSETS / path.relative_to(source)
        if target.is_file() and not target.is_symlink() and target.read_bytes() == path.read_bytes():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        shutil.copyfile(path, target)
