"""A small client of the virtual server for tests: POST, read SSE with arrival times, read the stamp log."""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

FIXED = {"prefill_tok_s": 100_000.0, "step_overhead_s": 0.005, "per_seq_s": 0.0001, "kv_capacity_tokens": 4096,
         "block_size": 16, "max_num_seqs": 64, "max_num_batched_tokens": 4096}  # fmt: skip
FIXED_JSON = json.dumps(FIXED)
MODEL = "test-model"


def sim_argv(*extra: str) -> list[str]:
    return [MODEL, "--perf", "fixed", "--fixed-json", FIXED_JSON, "--max-lifetime-s", "300", *extra]


@dataclass
class StreamResult:
    status: int  # 0: no response
    sent: float
    events: list[tuple[float, str]] = field(default_factory=list)  # (arrival time, data) per SSE event
    error: str | None = None  # the transport broke
    body: Any = None  # non-SSE answers, decoded
    ended: float = 0.0  # when the read ended (the answer was whole, the connection closed, or the read was cut)

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1][1] == "[DONE]"

    @property
    def chunks(self) -> list[dict[str, Any]]:
        """Every event that parses as JSON, in order."""
        out = []
        for _, data in self.events:
            try:
                out.append(json.loads(data))
            except ValueError:
                continue
        return out

    def text_times(self) -> list[float]:
        """Arrival of each text-bearing chunk."""
        times = []
        for t, data in self.events:
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            for choice in chunk.get("choices") or []:
                if choice.get("text") or (choice.get("delta") or {}).get("content"):
                    times.append(t)
        return times

    def text(self) -> str:
        parts = []
        for chunk in self.chunks:
            for choice in chunk.get("choices") or []:
                parts.append(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
        return "".join(parts)


def post(url: str, path: str, body: dict[str, Any], *, timeout_s: float = 30.0,
         read_limit: int | None = None) -> StreamResult:  # fmt: skip
    """POST and read the answer as SSE (or JSON when it is not a stream). ``read_limit``: stop reading (and
    close the connection) after that many events."""
    result = _post(url, path, body, timeout_s=timeout_s, read_limit=read_limit)
    result.ended = time.time()
    return result


def _post(url: str, path: str, body: dict[str, Any], *, timeout_s: float, read_limit: int | None) -> StreamResult:
    sent = time.time()
    try:
        resp = requests.post(f"{url}{path}", json=body, stream=True, timeout=timeout_s)
    except requests.RequestException as exc:  # no response at all
        return StreamResult(status=0, sent=sent, error=f"{type(exc).__name__}: {exc}")
    result = StreamResult(status=resp.status_code, sent=sent)
    if "text/event-stream" not in resp.headers.get("Content-Type", ""):
        try:
            result.body = resp.json()
        except (ValueError, requests.RequestException) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        return result
    buf = b""
    try:
        for piece in resp.iter_content(chunk_size=None):
            t = time.time()
            buf += piece
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                assert event.startswith(b"data: "), event
                result.events.append((t, event[6:].decode()))
                if read_limit is not None and len(result.events) >= read_limit:
                    resp.close()
                    return result
    except requests.RequestException as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


_UNIQUE = itertools.count()


def completion(prompt_words: int = 10, max_tokens: int = 8, **kw: Any) -> dict[str, Any]:
    """A streaming completion of ``prompt_words`` tokens whose first word is unique (the virtual server's prefix
    cache never serves one request's prompt to the next, as cardgen's request ids ensure)."""
    words = [f"u{next(_UNIQUE)}"] + ["word"] * (prompt_words - 1)
    body = {"model": MODEL, "prompt": " ".join(words), "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}  # fmt: skip
    body.update(kw)
    return body


def read_stamps(path: Path, ids: set[str], *, timeout_s: float = 3.0) -> dict[str, dict[str, Any]]:
    """Stamp-log records of ``ids`` (waits for the server's periodic flush)."""
    deadline = time.monotonic() + timeout_s
    found: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                record = json.loads(line)
                if record["id"] in ids:
                    found[record["id"]] = record
        if set(found) >= ids:
            break
        time.sleep(0.1)
    return found
