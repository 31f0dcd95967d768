"""The waves' saturation probe (the kind's analysis, summary.json ``kinds.waves``): what it makes of waves, its
estimate in the KV headline through the kinds' hook, and its table in the card's KV section."""

from __future__ import annotations

import pandas as pd
from simruns import SyntheticServer, synthetic_run

from cardgen.analysis.analyse import analyse
from cardgen.analysis.kindparts import kind_kv_estimates
from cardgen.analysis.requests import request_frame
from cardgen.analysis.timeseries import server_timeseries
from cardgen.card.kindparts import kind_sections
from cardgen.kinds.waves.analysis import SaturationProbe, WaveResult, kv_estimate, saturation_probe
from cardgen.schemas.records import RequestRecord
from cardgen.schemas.summary import KVEstimate, Summary

SUITE = """
name: waves
scenarios:
  - kind: waves
    prompt_tokens: 1024
    output_tokens: 128
    max_wave: 3
"""


def test_probe_without_waves():
    frame = request_frame([RequestRecord(scenario="x", kind="closed", prompt_tokens_target=1, output_tokens_target=1,
                                         sent_at=1.0, end_at=2.0, first_token_at=1.5, output_tokens=1)])
    assert saturation_probe(frame, server_timeseries([], engine="vllm"), block_size=None) == (None, [], None)
    assert isinstance(server_timeseries([], engine=None), pd.DataFrame)


def _waves_as_llamacpp_ran_them() -> pd.DataFrame:
    """The waves of a run against llama.cpp with 4 slots, a cache per slot, serving a tiny model (CI, 2026-11-29):
    each request took about 25 ms, so in the waves of 2 and 4 the second request started after the first ended;
    the wave of 8 ran 4 at once and queued the rest for a slot. (sent, first token, end) from the wave's start."""
    waves = {1: [(0.0, 0.018, 0.027)],
             2: [(0.031, 0.056, 0.056), (0.031, 0.085, 0.086)],
             4: [(0.091, 0.118, 0.118), (0.091, 0.144, 0.145), (0.09, 0.162, 0.206), (0.09, 0.175, 0.208)],
             8: [(0.221, 0.275, 0.351)] * 4 + [(0.221, 0.379, 0.41)] * 2 + [(0.222, 0.48, 0.509)] * 2}
    return request_frame([
        RequestRecord(scenario="waves-in256-out32", kind="waves", extra={"wave": wave}, prompt_tokens_target=256,
                      output_tokens_target=32, prompt_tokens=256, output_tokens=32, sent_at=100 + sent,
                      first_token_at=100 + first, end_at=100 + end, chunk_times=[100 + first, 100 + end])
        for wave, rows in waves.items() for sent, first, end in rows])


def test_a_calm_wave_whose_requests_all_failed_bounds_nothing():
    # the wave below the first saturated one has no tokens per request (the analysis raised TypeError here)
    frame = _waves_as_llamacpp_ran_them()
    frame.loc[frame["extra"].map(lambda e: e["wave"]) == 1, "ok"] = False
    estimate, waves, _ = saturation_probe(frame, server_timeseries([], engine="llamacpp"), block_size=None, slots=4)
    assert waves[0].tokens_per_request is None and not waves[0].saturated
    assert (estimate.low, estimate.high) == (0.0, 2 * 288)


def test_waves_against_a_cache_per_slot_measure_slots_never_kv():
    frame, ts = _waves_as_llamacpp_ran_them(), server_timeseries([], engine="llamacpp")
    # read as waves alone, the wave of 2 queued: a capacity of 2 requests, 94 % below what the server allocated
    estimate, waves, _ = saturation_probe(frame, ts, block_size=None, slots=4)
    assert [w.size for w in waves if w.queued] == [2, 4, 8] and estimate.high == 2 * 288
    # a cache per slot cannot be filled by requests that each fit a slot: no figure, and the card says why
    estimate, waves, note = saturation_probe(frame, ts, block_size=None, slots=4, cache_per_slot=True)
    assert estimate is None and len(waves) == 4
    assert note.startswith("each of the server's 4 slots holds a cache of its own")
    assert "never for KV blocks, so the waves (up to 8 requests) measured its slots, not its KV cache" in note



def test_the_probe_is_the_kinds_result_and_its_estimate_joins_the_headline():
    summary = analyse(synthetic_run(suite=SUITE, server=SyntheticServer(engine="none",
                                                                        kv_capacity_tokens=65536))[0]).summary
    result = SaturationProbe.model_validate(summary.kinds["waves"])
    assert [w.size for w in result.waves] == [1, 2, 3] and not any(w.saturated for w in result.waves)
    assert result.estimate is not None and result.estimate.lower_bound == 3 * 1152
    assert result.note == "waves up to 3 requests never saturated: capacity is at least 3,456 tokens"
    kv = summary.kv_cache
    assert [e.method for e in kv.estimates] == ["saturation_probe"] and kv.lower_bound == 3 * 1152
    assert kv.notes == {"saturation_probe": result.note}  # said of the bound, beside the estimates
    assert "saturation_probe" not in kv.not_run


def test_the_hook_says_why_without_a_figure():
    # a run with no waves point: the kind is asked with no result, and says so
    assert [(c.method, c.estimate, c.note) for c in kind_kv_estimates({}) if c.method == "saturation_probe"] == [
        ("saturation_probe", None, "the suite has no growing waves")]
    limited = SaturationProbe(waves=[WaveResult(wave=4, size=4, queued=True, tokens_per_request=10.0)],
                              note="wave 4 (4 requests) queued at 50% KV usage")
    assert (kv_estimate(limited).estimate, kv_estimate(limited).note) == (None, limited.note)
    bound = KVEstimate(method="saturation_probe", lower_bound=40.0)
    assert kv_estimate(SaturationProbe(estimate=bound)).estimate == bound


def test_the_waves_table_is_in_the_kv_slot():
    result = SaturationProbe(waves=[WaveResult(wave=1, size=1, tokens_per_request=1056.0, kv_usage_max=0.01),
                                    WaveResult(wave=2, size=2, tokens_per_request=1056.0, preempted=True)])
    sections = kind_sections(Summary(model="m", kinds={"waves": result.model_dump(mode="json")}))
    text = str(sections["kv"])
    assert text.startswith("Growing waves (all requests of a wave sent at once;")
    assert "| 1 | 1 | 1,056 | 1,056 | 1.00 % | no |" in text and "| 2 | 2 | 1,056 | 2,112 | — | preempted |" in text
    assert all("Growing waves" not in str(v) for slot, v in sections.items() if slot != "kv")
    # a run without waves, or a summary.json written before the kind kept its result (kv_cache.waves): no table
    old = Summary.model_validate({"model": "m", "kv_cache": {"waves": [{"wave": 1, "size": 1}],
                                                            "saturation_note": "waves up to 1 ..."}})
    assert str(kind_sections(old)["kv"]) == "" and old.kv_cache.notes == {}


def test_a_record_written_when_the_wave_was_a_common_field_reads_with_it_as_the_kinds_own():
    line = {"scenario": "waves-in256-out32", "kind": "waves", "wave": 3, "prompt_tokens_target": 256,
            "output_tokens_target": 32, "sent_at": 1.0}
    assert RequestRecord.model_validate(line).extra == {"wave": 3}
    assert RequestRecord.model_validate({**line, "wave": None}).extra is None
    assert "wave" not in RequestRecord.model_validate(line).model_dump()
