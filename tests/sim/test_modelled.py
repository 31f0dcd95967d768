"""``cardgen build MODEL`` with no server, run in process through the command line's entry point: the run it
writes, point by point, is the run the other tests make (:func:`simruns.simulate`), byte for byte, because both
are made by the one assembler of a modelled run (:func:`cardgen.sim.modelled.modelled_run`). What the tests
check of a modelled run is what a user's build writes."""

from __future__ import annotations

import sys

from simruns import simulate

from cardgen.cli.main import main
from cardgen.rundir import REQUESTS_JSONL, SERVER_METRICS_JSONL, RunDir
from cardgen.runwriter import suite_of
from cardgen.sim.modelled import ModelledServer, modelled_options

TINY = """name: tiny
scenarios:
  - {kind: ingest, prompt_tokens: [16, 256, 1024]}
  - {kind: closed, prompt_tokens: [256], output_tokens: [32], parallel: [1, 4], min_requests: 8}
  - {kind: open, prompt_tokens: 128, output_tokens: 16, rates: [8], num_requests: 8}
"""


def test_cardgen_build_without_a_server_writes_the_run_the_tests_make(tmp_path, capsys):
    (tmp_path / "tiny.yaml").write_text(TINY)
    out = tmp_path / "run"
    main(["build", "CodeLlama-7b", "--gpu", "A100-80GB", "--suite", str(tmp_path / "tiny.yaml"), "--out", str(out),
          "--quiet", "--no-card"])
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(out)
    assert "locust" not in sys.modules  # a modelled build runs no load engine
    files = RunDir(out)
    info = files.load_run_info()
    assert (info.status, info.clock, info.modelled, info.suite) == ("complete", "virtual", True, "tiny")
    assert info.build is not None and info.sim is not None and info.sim.gpu == "A100-80GB"  # what resume reads
    assert len(info.points) == 4 and all(p.ended_unix is not None for p in info.points)
    assert not files.card_md.exists()  # --no-card: the card is render's, tested on its own (tests/card)

    # the tests' modelled run of the same suite on the same server, started when the build started
    twin = simulate(suite_of(info), ModelledServer(model="CodeLlama-7b", gpu="A100-80GB").config(),
                    run_dir=tmp_path / "twin", options=modelled_options(start_unix=info.started_unix))
    for name in (REQUESTS_JSONL, SERVER_METRICS_JSONL):
        assert (tmp_path / "twin" / name).read_bytes() == (out / name).read_bytes(), name
    assert twin.info.points == info.points and twin.info.sim == info.sim and twin.info.gpu == info.gpu
    assert twin.info.requests_total == info.requests_total == len(twin.drive.records)


def test_the_card_of_a_build_is_the_card_render_makes_of_its_files(tmp_path, monkeypatch):
    """A build renders its card from the scrapes and the records as it wrote them (not read back from
    server_metrics.jsonl and requests.jsonl): ``cardgen render`` of the same files gives the same card, summary,
    tables and digests, byte for byte."""
    from cardgen.rundir import RunDir
    from cardgen.schemas.records import ScrapeSharer

    (tmp_path / "tiny.yaml").write_text(TINY)
    out = tmp_path / "run"
    reads, records = [], []
    real, stream = ScrapeSharer.read_line, RunDir.stream_records
    monkeypatch.setattr(ScrapeSharer, "read_line", lambda self, line: reads.append(1) or real(self, line))
    monkeypatch.setattr(RunDir, "stream_records", lambda self, name: (records.append(r) or r
                                                                      for r in stream(self, name)))
    main(["build", "CodeLlama-7b", "--gpu", "A100-80GB", "--suite", str(tmp_path / "tiny.yaml"), "--out", str(out),
          "--quiet"])
    scrapes = len((out / SERVER_METRICS_JSONL).read_bytes().splitlines())
    assert 0 < len(reads) < scrapes / 10  # the build read only the lines of a new layout (the first ones)
    assert records == []  # and no record: its rows were made as they were written
    built = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
             and p.suffix in (".md", ".json", ".csv") and p.name != "run.json"}
    reads.clear()
    main(["render", str(out)])
    assert len(reads) == scrapes  # render reads every line
    assert len(records) == len((out / REQUESTS_JSONL).read_bytes().splitlines()) > 0  # and every record
    again = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
             and p.suffix in (".md", ".json", ".csv") and p.name != "run.json"}
    assert len(built) > 5 and again == built
