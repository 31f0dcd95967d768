"""Synthetic run directories: a stand-in for real runs in tests, benchmarks and previews of the site.

:func:`write_sample_run` writes what the site and the Hub read from a run (``summary.json``, a ``README.md``
card with Hugging Face front matter and figure links, small PNG figures, tables, ``requests.jsonl``,
``run.json``), with figures scaled by ``speed``. The numbers are invented; the card says so.
"""

from __future__ import annotations

import datetime as _dt
import json
import struct
import zlib
from pathlib import Path

from cardgen.analysis.summary import Distribution, Headline, ScenarioSummary, Summary
from cardgen.rundir import (
    CARD_MD,
    FIGURES_DIR,
    REQUESTS_JSONL,
    SUMMARY_JSON,
    TABLES_DIR,
    default_run_dir,
)
from cardgen.runinfo import RunInfo, ServerInfo, save_run_info

SAMPLE_PAIRS = ((1024, 128), (32, 16))
SAMPLE_PARALLEL = (1, 4, 10, 16)


def png_bytes(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A valid PNG of one colour, made without any imaging library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    row = b"\x00" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height, 9))
        + chunk(b"IEND", b"")
    )


def sample_summary(
    *, model: str, gpu: str, engine: str, modelled: bool, started: _dt.datetime, speed: float
) -> Summary:
    """A plausible summary whose every throughput scales with ``speed``."""
    scenarios = []
    for prompt, output in SAMPLE_PAIRS:
        for parallel in SAMPLE_PARALLEL:
            per_request = speed * 70.0 / (1 + 0.07 * (parallel - 1)) * (1.0 if prompt < 2000 else 0.5)
            scenarios.append(
                ScenarioSummary(
                    scenario=f"closed-{prompt}-{output}-p{parallel}",
                    kind="closed",
                    prompt_tokens=prompt,
                    output_tokens=output,
                    parallel=parallel,
                    requests=20,
                    output_tok_s=round(per_request * parallel, 3),
                    speed_from_start_tok_s=Distribution(n=20, p50=round(per_request, 3)),
                    decode_tok_s=Distribution(n=20, p50=round(per_request * 1.15, 3)),
                    ttft_s=Distribution(n=20, p50=round(0.08 * parallel / speed, 4)),
                )
            )
    return Summary(
        model=model,
        gpu=gpu,
        engine=engine,
        engine_version="0.0-sample",
        modelled=modelled,
        suite="sample",
        started_at=started.isoformat(),
        cardgen_version="sample",
        prompt_ingestion_tok_s=13500.0 * speed,
        kv_cache_tokens=113_000.0,
        kv_cache_method="server_config",
        requests_total=160,
        requests_failed=0,
        headline=Headline(
            prompt_ingestion_tok_s=13500.0 * speed,
            generation_tok_s_at_10_parallel_1024_128=round(speed * 70.0 / 1.63, 3),
            decode_tok_s_at_10_parallel_1024_128=round(speed * 80.0 / 1.63, 3),
            kv_cache_tokens=113_000.0,
        ),
        scenarios=scenarios,
    )


def sample_card(summary: Summary) -> str:
    """A small card in the shape of the real one: front matter, headline table, figure links, methods."""
    h = summary.headline
    front = {
        "base_model": summary.model,
        "tags": ["benchmark", "cardgen", "sample"],
        "cardgen": {
            "gpu": summary.gpu,
            "engine": summary.engine,
            "modelled": summary.modelled,
            "prompt_ingestion_tok_s": h.prompt_ingestion_tok_s,
        },
    }
    return f"""---
{json.dumps(front, indent=2)}
---

# Performance card: {_md_escape(summary.model)} on {_md_escape(summary.gpu or "unknown GPU")}

These figures are a sample written by `cardgen.site.sample`, not a measurement.

## Main metrics

| Metric | Value |
| --- | --- |
| Prompt ingestion speed | {h.prompt_ingestion_tok_s:,.0f} tok/s |
| Generation at 10 parallel (1024 in / 128 out) | {h.generation_tok_s_at_10_parallel_1024_128:.1f} tok/s |
| KV cache | {h.kv_cache_tokens:,.0f} tokens |

## Total generation speed

![Total output throughput against parallel requests](figures/total_throughput.png)

## Generation speed and latency

<img src="./figures/speed_1024_128.png" width="800"/>

The numbers behind the figures: [serving table (CSV)](tables/serving.csv).
"""


def _md_escape(text: str) -> str:
    return "".join("\\" + c if c in "\\`*_{}[]()#+-.!|<>&" else c for c in text)


def write_sample_run(
    root: Path = Path("runs"),
    *,
    model: str = "CodeLlama-7b-Instruct-hf",
    gpu: str = "A100-80GB",
    engine: str = "vllm",
    modelled: bool = False,
    started: _dt.datetime | None = None,
    speed: float = 1.0,
    run_dir: Path | None = None,
    requests: int = 20,
) -> Path:
    """Write a sample run under ``root`` (``<model-slug>/<stamp>/`` unless ``run_dir``); return its path."""
    started = started or _dt.datetime(2026, 11, 21, 19, 57, tzinfo=_dt.UTC)
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir(model, root=Path(root), when=started)
    (run_dir / FIGURES_DIR).mkdir(parents=True, exist_ok=True)
    (run_dir / TABLES_DIR).mkdir(exist_ok=True)
    summary = sample_summary(
        model=model, gpu=gpu, engine=engine, modelled=modelled, started=started, speed=speed
    )
    (run_dir / SUMMARY_JSON).write_text(summary.model_dump_json(indent=2) + "\n", "utf-8")
    (run_dir / CARD_MD).write_text(sample_card(summary), "utf-8")
    shade = int(min(255, 80 + 60 * speed))
    (run_dir / FIGURES_DIR / "total_throughput.png").write_bytes(png_bytes(160, 90, (shade, 90, 200)))
    (run_dir / FIGURES_DIR / "speed_1024_128.png").write_bytes(png_bytes(160, 90, (40, shade, 120)))
    rows = [
        {"parallel": s.parallel, "output_tok_s": s.output_tok_s, "ttft_s_p50": s.ttft_s.p50}
        for s in summary.scenarios
        if s.prompt_tokens == 1024
    ]
    (run_dir / TABLES_DIR / "serving.json").write_text(json.dumps(rows, indent=1) + "\n", "utf-8")
    cols = list(rows[0])
    csv = [",".join(cols)] + [",".join(str(r[c]) for c in cols) for r in rows]
    (run_dir / TABLES_DIR / "serving.csv").write_text("\n".join(csv) + "\n", "utf-8")
    t0 = started.timestamp()
    with (run_dir / REQUESTS_JSONL).open("w", encoding="utf-8") as fh:
        for i in range(requests):
            sent = t0 + i * 0.5
            fh.write(
                json.dumps(
                    {
                        "scenario": "closed-1024-128-p1",
                        "response_id": f"cmpl-{i}",
                        "sent_at": sent,
                        "first_token_at": sent + 0.08,
                        "chunk_times": [sent + 0.08, sent + 0.1],
                        "prompt_tokens": 1024,
                        "output_tokens": 2,
                        "error": None,
                        "error_kind": None,
                    }
                )
                + "\n"
            )
    save_run_info(
        run_dir,
        RunInfo(
            cardgen_version="sample",
            command=["cardgen", "build", model],
            model=model,
            suite="sample",
            started_at=started.isoformat(),
            started_unix=t0,
            status="complete",
            modelled=modelled,
            server=ServerInfo(url="http://127.0.0.1:8000", engine=engine),
            gpu={"name": gpu},
            requests_total=summary.requests_total,
        ),
    )
    return run_dir


def isolated_config(config_file: Path, workdir: Path) -> Path:
    """A copy of ``config_file`` whose docs dir is ``workdir/site_src`` (with the committed assets copied),
    so a     test or benchmark builds without touching the checkout's ``site_src/``."""
    import shutil

    import yaml

    config_file = Path(config_file).resolve()
    data = yaml.safe_load(config_file.read_text("utf-8"))
    original_docs = config_file.parent / data.get("docs_dir", "docs")
    docs = Path(workdir).resolve() / "site_src"
    docs.mkdir(parents=True, exist_ok=True)
    if (original_docs / "assets").is_dir():
        shutil.copytree(original_docs / "assets", docs / "assets", dirs_exist_ok=True)
    data["docs_dir"] = str(docs)
    out = Path(workdir) / "mkdocs.yml"
    out.write_text(yaml.safe_dump(data, sort_keys=False), "utf-8")
    return out
