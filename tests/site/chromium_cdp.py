"""Headless Debian Chromium driven over the DevTools protocol (websocket-client), just enough for the
browser test: navigate, evaluate, click, screenshot, and collect console errors and dialogs."""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
ERROR_EVENTS = ("Runtime.exceptionThrown", "Page.javascriptDialogOpening")


class Chromium:
    """One Chromium process with one page; use as a context manager."""

    def __init__(self, binary: str, profile: Path, *, width: int = 1280, height: int = 900) -> None:
        self.profile = Path(profile)
        self.log = self.profile.parent / "chromium.log"
        cmd = [
            binary,
            *FLAGS,
            f"--user-data-dir={self.profile}",
            "--remote-debugging-port=0",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.events: list[dict[str, Any]] = []
        self._id = 0
        self.ws = self._connect()

    def _connect(self) -> Any:
        import websocket

        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.is_file() or not port_file.read_text().strip():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            targets = json.load(resp)
        page = next(t for t in targets if t.get("type") == "page")
        return websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)

    def __enter__(self) -> Chromium:
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def _receive(self) -> dict[str, Any]:
        message = json.loads(self.ws.recv())
        if "method" in message:
            self.events.append(message)
        return message

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = self._receive()
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def wait_event(self, method: str, *, after: int, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events[after:]:
                if event["method"] == method:
                    return event
            if time.monotonic() > deadline:
                raise TimeoutError(method)
            self._receive()

    def goto(self, url: str) -> None:
        mark = len(self.events)
        self.send("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired", after=mark)

    def eval(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click in the middle of the element (scrolled into view first)."""
        box = self.eval(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView({{block: 'center'}});"
            " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def screenshot(self, path: Path, *, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        Path(path).write_bytes(base64.b64decode(self.send("Page.captureScreenshot", **params)["data"]))
        return Path(path)

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions, failed loads and dialogs seen so far."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method in ERROR_EVENTS:
                found.append(f"{method}: {json.dumps(params)[:300]}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(f"console.{params['type']}: {json.dumps(params.get('args'))[:300]}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                found.append(f"log: {entry.get('text')} {entry.get('url', '')}")
        return found
