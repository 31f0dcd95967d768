"""``cardgen push`` and ``cardgen site --from-hub``: the real huggingface_hub client against a local Hub."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from fakehub import TOKEN

from cardgen.cli.main import main
from cardgen.site.sample import isolated_config, write_sample_run

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

REPO = Path(__file__).resolve().parents[2]


def _run(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    assert TOKEN not in out.out and TOKEN not in out.err
    return code, out.out, out.err


def _no_token_on_disk(*roots: Path) -> None:
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                assert TOKEN.encode() not in path.read_bytes(), path


def test_card_goes_into_a_subfolder_as_one_pull_request(fake_hub, tmp_path, capsys):
    run = write_sample_run(tmp_path / "runs")
    code, out, err = _run(capsys, "push", str(run), "--repo", "org/model")
    assert code == 0, err
    (commit,) = fake_hub.hub.commits
    assert commit.repo_type == "model" and commit.repo_id == "org/model" and commit.create_pr
    assert commit.header["summary"].startswith("cardgen: measured performance card for CodeLlama-7b")
    rendered = [p.relative_to(run).as_posix() for p in (*run.glob("figures/*"), *run.glob("tables/*"))]
    assert "figures/total_throughput.png" in rendered and "tables/serving.csv" in rendered
    assert sorted(commit.files) == sorted(f"perf/a100-80gb/{rel}" for rel in ["README.md", "summary.json", *rendered])
    assert commit.files["perf/a100-80gb/README.md"] == (run / "README.md").read_bytes()
    assert (
        commit.files["perf/a100-80gb/figures/total_throughput.png"]
        == (run / "figures" / "total_throughput.png").read_bytes()
    )
    # every link of the card resolves inside the folder that was uploaded
    assert "](figures/total_throughput.png)" in commit.files["perf/a100-80gb/README.md"].decode()
    assert fake_hub.hub.repos[("model", "org/model")]["README.md"].startswith(b"---\nlicense: mit")
    assert "Opened pull request: " in out and "/discussions/1" in out
    for req in fake_hub.hub.requests:
        assert TOKEN.encode() not in req.body
    assert all(req.headers.get("authorization") == f"Bearer {TOKEN}" for req in fake_hub.hub.requests)
    for data in commit.files.values():
        assert TOKEN.encode() not in data
    _no_token_on_disk(tmp_path)


def test_no_pr_and_path_in_repo(fake_hub, tmp_path, capsys):
    run = write_sample_run(tmp_path / "runs")
    code, out, err = _run(
        capsys, "push", str(run), "--repo", "org/model", "--path-in-repo", "/bench/a100/", "--no-pr"
    )
    assert code == 0, err
    (commit,) = fake_hub.hub.commits
    assert not commit.create_pr and "bench/a100/README.md" in commit.files
    assert "Committed: " in out


@pytest.mark.parametrize("bad", ["", ".", "/", "..", "a/../b"])
def test_never_the_root_readme(fake_hub, tmp_path, capsys, bad):
    run = write_sample_run(tmp_path / "runs")
    code, _, err = _run(capsys, "push", str(run), "--repo", "org/model", "--path-in-repo", bad)
    assert code == 2 and "--path-in-repo must be a subfolder" in err
    assert fake_hub.hub.requests == []


def test_dry_run_lists_and_sends_nothing(fake_hub, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")  # a dry run needs no token either
    run = write_sample_run(tmp_path / "runs")
    code, out, err = _run(
        capsys, "push", str(run), "--repo", "org/model", "--dataset", "org/runs", "--dry-run"
    )
    assert code == 0, err
    assert "perf/a100-80gb/README.md" in out and "as a pull request" in out
    assert "runs/codellama-7b-instruct-hf/20261121T195700Z/requests.jsonl" in out
    assert "Dry run: nothing was sent." in out
    assert fake_hub.hub.requests == [] and fake_hub.hub.commits == []


def test_files_outside_the_run_are_never_uploaded(fake_hub, tmp_path, capsys):
    run = write_sample_run(tmp_path / "runs")
    (tmp_path / "secret.txt").write_text("not for the Hub")
    (run / "figures" / "leak.png").symlink_to(tmp_path / "secret.txt")
    (run / ".hidden").write_text("x")
    code, out, err = _run(
        capsys, "push", str(run), "--repo", "org/model", "--dataset", "org/runs", "--dry-run"
    )
    assert code == 0, err
    assert "leak.png" not in out and ".hidden" not in out


def test_modelled_card_is_refused_unless_allowed(fake_hub, tmp_path, capsys):
    run = write_sample_run(tmp_path / "runs", modelled=True)
    code, _, err = _run(capsys, "push", str(run), "--repo", "org/model")
    assert code == 2 and "modelled" in err and "--allow-modelled" in err
    assert fake_hub.hub.requests == []
    code, _, err = _run(capsys, "push", str(run), "--repo", "org/model", "--allow-modelled")
    assert code == 0, err
    assert fake_hub.hub.commits[0].header["summary"].startswith("cardgen: modelled performance card")


def test_bad_token_is_a_one_line_401(fake_hub, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_wrong_token")
    run = write_sample_run(tmp_path / "runs")
    code, _, err = _run(capsys, "push", str(run), "--repo", "org/model")
    assert code == 1 and err.count("\n") == 1
    assert "refused the token (HTTP 401)" in err and "hf_wrong_token" not in err
    assert fake_hub.hub.commits == []


def test_missing_repo_is_a_one_line_404(fake_hub, tmp_path, capsys):
    run = write_sample_run(tmp_path / "runs")
    code, _, err = _run(capsys, "push", str(run), "--repo", "org/absent")
    assert code == 1 and err.count("\n") == 1 and "org/absent not found" in err and "HTTP 404" in err


def test_unreachable_hub_is_a_one_line_error(fake_hub, tmp_path, capsys, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    run = write_sample_run(tmp_path / "runs")
    code, _, err = _run(capsys, "push", str(run), "--repo", "org/model")
    assert code == 1 and err.count("\n") == 1 and "unreachable" in err
    code, _, err = _run(
        capsys,
        "site",
        "--from-hub",
        "org/runs",
        "--out",
        str(tmp_path / "site"),
        "--config",
        str(isolated_config(REPO / "mkdocs.yml", tmp_path)),
    )
    assert code == 1 and err.count("\n") == 1 and "unreachable" in err


def test_no_token_is_a_one_line_error(fake_hub, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    run = write_sample_run(tmp_path / "runs")
    code, _, err = _run(capsys, "push", str(run), "--repo", "org/model")
    assert code == 1 and "no Hugging Face token" in err
    assert fake_hub.hub.requests == []


def test_nothing_to_push_and_bad_repo_ids(fake_hub, tmp_path, capsys):
    run = write_sample_run(tmp_path / "runs")
    code, _, err = _run(capsys, "push", str(run))
    assert code == 2 and "nothing to push" in err
    code, _, err = _run(capsys, "push", str(run), "--repo", "not a repo")
    assert code == 2 and "ORG/NAME" in err
    assert fake_hub.hub.requests == []


def test_dataset_round_trip_builds_the_site_from_the_hub(fake_hub, tmp_path, capsys):
    first = write_sample_run(tmp_path / "runs")
    second = write_sample_run(tmp_path / "runs", model="Mistral-7B", gpu="L4", speed=0.5)
    for run in (first, second):
        code, _, err = _run(capsys, "push", str(run), "--dataset", "org/runs", "--no-pr")
        assert code == 0, err
    files = fake_hub.hub.repos[("dataset", "org/runs")]
    assert "runs/codellama-7b-instruct-hf/20261121T195700Z/requests.jsonl" in files
    assert "runs/mistral-7b/20261121T195700Z/summary.json" in files
    assert all(c.repo_type == "dataset" and not c.create_pr for c in fake_hub.hub.commits)
    config = isolated_config(REPO / "mkdocs.yml", tmp_path / "work")
    code, out, err = _run(
        capsys, "site", "--from-hub", "org/runs", "--out", str(tmp_path / "site"), "--config", str(config)
    )
    assert code == 0, err
    assert "from 2 runs" in out
    site = tmp_path / "site"
    pages = sorted(p.relative_to(site).as_posix() for p in (site / "runs").rglob("index.html"))
    assert pages == [
        "runs/codellama-7b-instruct-hf/20261121t195700z/index.html",
        "runs/mistral-7b/20261121t195700z/index.html",
    ]
    assert "Mistral-7B" in (site / "index.html").read_text("utf-8")
    _no_token_on_disk(tmp_path)


def test_from_hub_with_an_empty_dataset_says_so(fake_hub, tmp_path, capsys):
    config = isolated_config(REPO / "mkdocs.yml", tmp_path)
    code, _, err = _run(
        capsys, "site", "--from-hub", "org/runs", "--out", str(tmp_path / "site"), "--config", str(config)
    )
    assert code == 1 and "holds no runs" in err


def test_a_published_run_leaves_out_the_load_machines_name_and_process(fake_hub, tmp_path, capsys):
    import json

    run = write_sample_run(tmp_path / "runs")
    local = json.loads((run / "run.json").read_text("utf-8"))
    local.update(pid=4242, hostname="gpu-box-17.corp.internal", heartbeat_unix=1_790_000_000.0)
    (run / "run.json").write_text(json.dumps(local), "utf-8")
    code, out, err = _run(capsys, "push", str(run), "--dataset", "org/runs", "--no-pr")
    assert code == 0, err
    files = fake_hub.hub.repos[("dataset", "org/runs")]
    published = {k: v for k, v in files.items() if k.endswith("/run.json")}
    assert len(published) == 1
    text = next(iter(published.values()))
    text = text.decode("utf-8") if isinstance(text, bytes) else text
    assert "gpu-box-17" not in text and "4242" not in text
    data = json.loads(text)
    assert not {"pid", "hostname", "heartbeat_unix"} & set(data)
    assert data["model"] == local["model"] and data["points"] == local["points"]
    assert json.loads((run / "run.json").read_text("utf-8"))["hostname"] == "gpu-box-17.corp.internal"
