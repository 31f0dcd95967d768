"""The scraper's own process (``python -m cardgen.load.scrapeproc``): what it writes, and that it imports only what
a scrape needs. Every real-server build waits for its first line before the first request, so what it imports is
on every build's path (the whole of cardgen: 1.3 s on two cores; the scrape's share: 0.5 s)."""

from __future__ import annotations

import importlib
import json
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import cardgen.schemas as schemas
from cardgen.schemas.records import MetricSample

pytestmark = [pytest.mark.slow, pytest.mark.wire]  # processes; nothing here is timed

EXPOSITION = ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n"
              "# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total{model_name=\"m\"} 42\n")
# what the scrape process must not pull in: the engines, the run directory's models and the suite behind them, the
# load generator
HEAVY = ("cardgen.engines", "cardgen.schemas.run", "cardgen.schemas.summary", "cardgen.kinds", "cardgen.rundir",
         "pandas", "gevent", "locust")


class _Metrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # the handler's name
        body = EXPOSITION.encode() if self.path == "/metrics" else b""
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metrics_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_scrape_process_imports_none_of_the_rest_of_cardgen():
    probe = f"import sys, cardgen.load.scrapeproc; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_it_writes_parsed_samples_and_one_last_after_sigterm(metrics_url, tmp_path):
    out = tmp_path / "server_metrics.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "cardgen.load.scrapeproc", "--url", f"{metrics_url}/metrics",
                             "--out", str(out), "--interval", "0.1"])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n") >= 2):
            time.sleep(0.05)
        before = out.read_text().count("\n")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    lines = out.read_text().splitlines()
    assert before >= 2 and len(lines) > before  # what it had written stays, and one scrape came after the signal
    samples = [MetricSample.model_validate(json.loads(line)) for line in lines]
    assert all(s.error is None and s.t_end is not None and s.t_end >= s.t for s in samples)
    assert samples[-1].value("vllm:num_requests_running") == 3.0
    assert samples[-1].value("vllm:generation_tokens_total") == 42.0


def test_a_missing_endpoint_is_a_sample_with_its_error(metrics_url, tmp_path):
    out = tmp_path / "server_metrics.jsonl"
    subprocess.run([sys.executable, "-m", "cardgen.load.scrapeproc", "--url", f"{metrics_url}/nothing", "--out",
                    str(out), "--interval", "0.1", "--stop-after", "0.3"], timeout=60, check=True)
    samples = [MetricSample.model_validate(json.loads(line)) for line in out.read_text().splitlines()]
    assert samples and all(s.error == "HTTP 404" and not s.samples for s in samples)


def test_the_schemas_package_names_every_model_it_imports_on_first_use():
    assert sorted(schemas.__all__) == sorted(schemas._HOMES)
    for name, home in schemas._HOMES.items():
        assert getattr(schemas, name) is getattr(importlib.import_module(f"cardgen.schemas.{home}"), name)
    with pytest.raises(AttributeError):
        _ = schemas.NoSuchModel
