from __future__ import annotations

import hashlib

import pytest
from matplotlib.figure import Figure
from simruns import synthetic_run

from cardgen.analysis.analyse import analyse
from cardgen.figures import data, render
from cardgen.figures.draw import draw_lines
from cardgen.figures.names import FIGURE_NAMES
from cardgen.figures.render import write_figures
from cardgen.kinds.closed.figures import TOTAL_THROUGHPUT, pair_figure_name

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

SUITE = """
name: figures
scenarios:
  - kind: ingest
    prompt_tokens: [16, 512, 1024, 2048]
  - kind: closed
    prompt_tokens: [256]
    output_tokens: [16]
    parallel: [1, 4]
    min_requests: 4
"""


def test_pngs_written_and_byte_identical(tmp_path):
    analysis = analyse(synthetic_run(suite=SUITE)[0])
    first = write_figures(analysis, tmp_path, processes=1)
    expected = {FIGURE_NAMES[k] for k in ("ingestion", "timeline", "throughput_latency", "latency_percentiles",
                                          "throughput_interactivity", "time_budget")} | {TOTAL_THROUGHPUT, pair_figure_name((256, 16))}
    assert {name.split("/", 1)[1] for name in first} == expected
    digest = {n: hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in first}
    for name in first:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert b"Matplotlib" not in (tmp_path / name).read_bytes()  # no version (or date) in the metadata
    (tmp_path / "figures" / "stale.png").write_bytes(b"old")
    second = write_figures(analysis, tmp_path, processes=3)  # drawn by forked processes: the same bytes
    assert second == first
    assert {n: hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in second} == digest
    assert not (tmp_path / "figures" / "stale.png").exists()


@pytest.mark.parametrize("processes", [1, 2])
def test_a_failed_drawing_leaves_the_previous_figures(tmp_path, monkeypatch, processes):
    """A drawing that fails (in this process, or in one of those drawing at once) fails the whole: the figures
    before are left as they were, and no temporary file."""
    analysis = analyse(synthetic_run(suite=SUITE)[0])
    first = write_figures(analysis, tmp_path)
    before = {n: (tmp_path / n).read_bytes() for n in first}
    (tmp_path / "figures" / "stale.png").write_bytes(b"old")
    calls = []

    def failing(fig, path):
        calls.append(path)
        if len(calls) == 3:
            raise RuntimeError("out of memory")
        real(fig, path)

    real = render._save
    monkeypatch.setattr(render, "_save", failing)
    with pytest.raises(RuntimeError, match="out of memory"):
        write_figures(analysis, tmp_path, processes=processes)
    assert {n: (tmp_path / n).read_bytes() for n in first} == before  # every figure still there, whole
    assert (tmp_path / "figures" / "stale.png").exists()  # nothing removed before every new figure is drawn
    assert not list((tmp_path / "figures").glob("*.tmp"))
    assert len(calls) == (3 if processes == 1 else 0)  # (a forked process counts its own)
    assert all(c.name.endswith(".png.tmp") for c in calls)


def test_draw_lines_onto_given_axes():
    fig = Figure()
    ax = fig.subplots()
    import numpy as np

    draw_lines(ax, [data.Line("a", np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([2.5, 3.5]),
                              np.array([3.5, 4.5]))], xlabel="parallel requests", ylabel="tokens/s")
    assert ax.get_xlabel() == "parallel requests" and ax.get_ylabel() == "tokens/s"
    assert ax.lines[0].get_ydata().tolist() == [3.0, 4.0]
    assert len(ax.collections) == 1  # the band
    assert ax.get_ylim()[0] == pytest.approx(0)
