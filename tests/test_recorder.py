import json
import math
import subprocess
import sys
import textwrap

import pytest

from cardgen.load.sink import RecordSink
from cardgen.recorder import Recorder
from cardgen.rundir import REQUESTS_JSONL
from cardgen.schemas.records import ErrorKind, LoadgenSample, RequestRecord


def rec(**kw):
    base = dict(scenario="p", kind="closed", prompt_tokens_target=8, output_tokens_target=4, sent_at=1.0,
                end_at=2.0, output_tokens=4)
    return RequestRecord(**{**base, **kw})


def read_back(path):
    return [RequestRecord.model_validate_json(line) for line in path.read_text().splitlines()]


def test_records_are_on_disk_as_soon_as_they_arrive(tmp_path):
    r = Recorder(tmp_path)
    sink = RecordSink(r.record, on_fatal=pytest.fail)
    sink.on_request(context={"record": rec()})
    # not closed yet: the line must already be readable (a crash now loses nothing)
    lines = (tmp_path / REQUESTS_JSONL).read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["scenario"] == "p"
    sink.on_request(context={"record": rec(error="HTTP 500", error_kind=ErrorKind.HTTP_STATUS, output_tokens=None)})
    sink.on_request(context={"record": rec(output_tokens=3)})
    r.close()
    assert (r.total, r.failed, dict(r.tally.failures_by_kind), r.tally.length_mismatches) == (3, 1, {"http_status": 1}, 1)
    assert [x.ok for x in read_back(tmp_path / REQUESTS_JSONL)] == [True, False, True]
    assert sink.delivered == 3 and sink.fatal is None


def test_a_broken_record_path_fails_loudly_once(tmp_path):
    seen = []
    r = Recorder(tmp_path)
    sink = RecordSink(r.record, on_fatal=seen.append)
    sink.on_request(context={"record": rec()})
    r._lines._opened["requests"].close()  # the file can no longer be written: the next record must not vanish silently
    sink.on_request(context={"record": rec()})  # Locust would swallow an exception: the sink never raises
    assert seen == [sink.fatal] and sink.fatal.startswith("record 2: ValueError")
    sink.on_request(context={})  # a request without its record is a bug, also loud, but reported once
    assert len(seen) == 1 and (sink.seen, sink.delivered, r.total) == (3, 1, 1)


def test_the_sink_fails_on_purpose_at_the_nth_record(tmp_path):
    seen = []
    r = Recorder(tmp_path)
    sink = RecordSink(r.record, on_fatal=seen.append, fail_at=2)
    for _ in range(3):
        sink.on_request(context={"record": rec()})
    r.close()
    assert len(seen) == 1 and "CARDGEN_FAULT_RECORD_AT=2" in seen[0]
    assert r.total == 2 == len((tmp_path / REQUESTS_JSONL).read_text().splitlines())


def test_writing_after_close_raises(tmp_path):
    r = Recorder(tmp_path)
    r.close()
    r.close()  # twice is nothing
    with pytest.raises(RuntimeError, match="after the recorder was closed"):
        r.loadgen(LoadgenSample(t=1.0, loop_lag_s=0.001))
    with pytest.raises(RuntimeError, match="after the recorder was closed"):
        r.record(rec())


def test_an_all_at_once_rate_is_valid_json_and_reads_back_as_inf(tmp_path):
    r = Recorder(tmp_path)
    r.record(rec(kind="open", rate_rps=math.inf, scheduled_at=1.0))
    r.close()
    line = (tmp_path / REQUESTS_JSONL).read_text()
    assert '"rate_rps":"Infinity"' in line
    json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))  # strict JSON
    assert math.isinf(read_back(tmp_path / REQUESTS_JSONL)[0].rate_rps)


def test_stalls_are_blamed_on_the_points_they_happened_in_and_not_on_waves(tmp_path):
    # in a process of its own: the load stage imports Locust, which monkey-patches the process for gevent
    code = textwrap.dedent(f"""
        import locust
        from pathlib import Path
        from cardgen.recorder import Recorder
        from cardgen.load.clientcheck import judge_client as _judge_client, loadgen_report as _loadgen_report
        from cardgen.schemas.records import LoadgenSample
        from cardgen.schemas.run import PointOutcome

        rec = Recorder(Path({str(tmp_path)!r}))
        for t in range(40):  # 0-19 s: a closed point, calm; 20-39 s: stalling 30 ms every second
            rec.loadgen(LoadgenSample(t=float(t), loop_lag_s=0.030 if t >= 20 else 0.001))
        rec.close()
        calm = PointOutcome(name="closed-p4", kind="closed", started_unix=0.0, ended_unix=19.5)
        waves = PointOutcome(name="waves", kind="waves", started_unix=19.5, ended_unix=40.0)
        judged = lambda points: [_judge_client(rec, p) for p in points]
        _, warnings = _loadgen_report(rec, judged([calm, waves]))
        assert not any("fell behind" in w for w in warnings), warnings  # waves read the server, not client timings
        stalling = PointOutcome(name="closed-p64", kind="closed", started_unix=19.5, ended_unix=40.0)
        _, warnings = _loadgen_report(rec, judged([calm, stalling]))
        (warning,) = [w for w in warnings if "fell behind" in w]
        assert "closed-p64 (fell behind: event-loop lag p95 30.0 ms" in warning and "closed-p4" not in warning, warning
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
