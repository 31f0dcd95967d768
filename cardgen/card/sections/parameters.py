"""The parameters table: what was measured, with what, when, and under which SLOs and thresholds."""

from __future__ import annotations

from cardgen import numbers as fmt
from cardgen.card.table import TableView
from cardgen.schemas.run import LoadWorker, RunInfo
from cardgen.schemas.summary import Summary, WorkerPath


def parameters_table(s: Summary, info: RunInfo, date: str) -> TableView:
    o = s.options
    paths = {p.worker: p for p in s.load_workers}
    rows = [
        ["Model", s.model], ["Served model id", s.served_model or fmt.DASH],
        ["Engine", s.engine or fmt.DASH], ["Engine version", s.engine_version or fmt.DASH],
        ["GPU", s.gpu or fmt.DASH], ["GPU count", str(s.gpu_count) if s.gpu_count is not None else fmt.DASH],
        ["GPU driver", s.gpu_driver or fmt.DASH],
        ["Figures", f"modelled by {s.modelled_by}" if s.modelled else "measured"],
        ["cardgen version (measurement)", s.cardgen_version or fmt.DASH], ["Suite", s.suite or fmt.DASH],
        ["Prompt sizing", info.server.tokenizer],
        ["Load generator processes", (str(info.workers) if info.workers else fmt.DASH)
         + (" (--workers auto)" if info.workers_choice else "")],
        *([["Load generator CPUs (--low-latency)", info.loadgen.cpus_awake]] if info.loadgen.cpus_awake else []),
        *([f"Load worker {w.name}" + (f" (session {w.session + 1})" if len({x.session for x in info.load_workers}) > 1
                                       else ""), worker_facts(w, paths.get(w.name))] for w in info.load_workers),
        ["Run started (UTC)", s.started_at or fmt.DASH], ["Run ended (UTC)", s.ended_at or fmt.DASH],
        ["Run status", s.run_status or fmt.DASH],
        ["Requests (failed)", f"{s.requests_total} ({s.requests_failed})"],
        *([["Superseded records (kept on disk, not counted)", str(s.superseded_requests)]]
          if s.superseded_requests else []),
        ["SLOs for goodput", f"TTFT ≤ {fmt.secs(o.get('slo_ttft_s'))}, TPOT ≤ {fmt.ms(o.get('slo_tpot_s'))}"],
        ["Capacity thresholds", f"≥ {fmt.tok_s(o.get('min_speed_tok_s'))} per request; KV usage < "
                                f"{fmt.pct(o.get('max_kv_usage'))}"],
        ["Card date", date or fmt.DASH],
    ]
    return TableView(["Parameter", "Value"], rows, ["l", "l"])


def worker_facts(w: LoadWorker, path: WorkerPath | None = None) -> str:
    """One load worker in words: where it ran, what it sent, its clock against the master's, whether it kept up,
    its path to the server against the other workers' (``path``: cardgen.analysis.workers) and how it ended."""
    where = " ".join(x for x in (w.host, f"({w.address})" if w.address else None) if x) or fmt.DASH
    parts = [f"host {where}", f"{w.requests} requests" + (f" ({w.lost_requests} lost with it)" if w.lost_requests
                                                          else "")]
    if w.clock_offset_s is not None and w.clock_uncertainty_s is not None:
        fixed = "stamps corrected" if w.clock_applied_s else "not told apart from 0"
        parts.append(f"clock {w.clock_offset_s * 1e3:+.3f} ms ± {w.clock_uncertainty_s * 1e3:.3f} ms against the "
                     f"master's ({fixed})")
    else:
        parts.append("clock not measured")
    parts.append({True: "kept up", False: "fell behind", None: "not judged"}[w.kept_up])
    if path is not None and path.ttft_excess_s is not None:
        low, high = path.ttft_excess_ci_low, path.ttft_excess_ci_high
        interval = f" ({low * 1e3:+.1f} to {high * 1e3:+.1f})" if low is not None and high is not None else ""
        parts.append(f"TTFT {path.ttft_excess_s * 1e3:+.1f} ms{interval} against the quickest other "
                     "worker's on the same points" + (": a slower path to the server" if path.slower else ""))
    if w.cpus_awake:
        parts.append(f"CPUs {w.cpus_awake} (--low-latency)")
    if w.lost:
        parts.append(f"lost: {w.lost}")
    return "; ".join(parts)
