"""A small stand-in for the Hugging Face Hub on 127.0.0.1: the endpoints the real huggingface_hub client calls
for ``create_commit`` (repo info, preupload, NDJSON commit) and ``snapshot_download`` (revision info,
recursive tree, HEAD/GET resolve). It records every request so tests can check what arrived.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

SHA = "0123456789abcdef0123456789abcdef01234567"



TOKEN = "hf_cardgenTEST_token_0123456789abcdef"  # a made-up token the fake Hub accepts

@dataclass
class Commit:
    repo_type: str
    repo_id: str
    revision: str
    create_pr: bool
    header: dict[str, Any]
    files: dict[str, bytes]


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass
class FakeHub:
    token: str
    repos: dict[tuple[str, str], dict[str, bytes]] = field(
        default_factory=dict
    )  # (type, id) -> files on main
    commits: list[Commit] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    url: str = ""

    def add_repo(self, repo_type: str, repo_id: str, files: dict[str, bytes] | None = None) -> None:
        self.repos[(repo_type, repo_id)] = dict(files or {})


_API = re.compile(r"^/api/(?P<type>models|datasets)/(?P<org>[^/]+)/(?P<name>[^/]+)(?P<rest>/.*)?$")
_RESOLVE = re.compile(
    r"^/(?:(?P<type>datasets)/)?(?P<org>[^/]+)/(?P<name>[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"
)


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(
            self,
            status: int,
            body: bytes | dict | list = b"",
            headers: dict[str, str] | None = None,
            head: bool = False,
        ) -> None:
            data = json.dumps(body).encode() if isinstance(body, dict | list) else body
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            if isinstance(body, dict | list):
                self.send_header("Content-Type", "application/json")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if not head:
                self.wfile.write(data)

        def _record(self) -> Request:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            headers = {k.lower(): v for k, v in self.headers.items()}
            req = Request(self.command, unquote(parts.path), parse_qs(parts.query), headers, body)
            hub.requests.append(req)
            return req

        def _authorized(self) -> bool:
            auth = self.headers.get("Authorization")
            if auth is None or auth == f"Bearer {hub.token}":
                return True
            self._reply(
                401,
                {"error": "Invalid credentials in Authorization header"},
                {"X-Error-Message": "Invalid credentials in Authorization header"},
            )
            return False

        def _repo(self, kind: str, org: str, name: str) -> tuple[tuple[str, str], dict[str, bytes]] | None:
            key = (kind.rstrip("s"), f"{org}/{name}")
            if key not in hub.repos:
                self._reply(
                    404,
                    {"error": "Repository not found"},
                    {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"},
                )
                return None
            return key, hub.repos[key]

        def do_HEAD(self) -> None:
            self.do_GET(head=True)

        def do_GET(self, head: bool = False) -> None:
            req = self._record()
            if not self._authorized():
                return
            m = _API.match(req.path)
            if m:
                found = self._repo(m["type"], m["org"], m["name"])
                if found is None:
                    return
                (kind, repo_id), files = found
                rest = m["rest"] or ""
                if rest.startswith("/tree/"):
                    entries = [
                        {"type": "file", "path": p, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                        for p, b in sorted(files.items())
                    ]
                    return self._reply(200, entries, head=head)
                siblings = [{"rfilename": p} for p in sorted(files)]
                return self._reply(
                    200, {"id": repo_id, "sha": SHA, "private": False, "siblings": siblings}, head=head
                )
            m = _RESOLVE.match(req.path)
            if m:
                found = self._repo(m["type"] or "models", m["org"], m["name"])
                if found is None:
                    return
                _, files = found
                if m["path"] not in files:
                    return self._reply(
                        404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"}, head
                    )
                data = files[m["path"]]
                etag = '"' + hashlib.sha1(data).hexdigest() + '"'
                return self._reply(200, data, {"ETag": etag, "X-Repo-Commit": SHA}, head=head)
            self._reply(404, {"error": f"no route {req.path}"})

        def do_POST(self) -> None:
            req = self._record()
            if not self._authorized():
                return
            m = _API.match(req.path)
            found = self._repo(m["type"], m["org"], m["name"]) if m else None
            if m is None:
                return self._reply(404, {"error": "no route"})
            if found is None:
                return
            (kind, repo_id), files = found
            rest = m["rest"] or ""
            if rest.startswith("/preupload/"):
                payload = json.loads(req.body)
                return self._reply(
                    200,
                    {
                        "files": [
                            {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                            for f in payload["files"]
                        ]
                    },
                )
            if rest.startswith("/commit/"):
                lines = [json.loads(line) for line in req.body.splitlines() if line.strip()]
                header = next(x["value"] for x in lines if x["key"] == "header")
                got = {
                    x["value"]["path"]: base64.b64decode(x["value"]["content"])
                    for x in lines
                    if x["key"] == "file"
                }
                create_pr = req.query.get("create_pr") == ["1"]
                hub.commits.append(Commit(kind, repo_id, rest.split("/", 2)[2], create_pr, header, got))
                if not create_pr:
                    files.update(got)
                n = len(hub.commits)
                prefix = hub.url + ("datasets/" if kind == "dataset" else "")
                return self._reply(
                    200,
                    {
                        "commitUrl": f"{prefix}{repo_id}/commit/{SHA[:-2]}{n:02d}",
                        "commitOid": f"{SHA[:-2]}{n:02d}",
                        "pullRequestUrl": f"{prefix}{repo_id}/discussions/{n}" if create_pr else None,
                    },
                )
            self._reply(404, {"error": "no route"})

    return Handler


@dataclass
class RunningHub:
    hub: FakeHub
    server: ThreadingHTTPServer
    thread: threading.Thread

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def start_fake_hub(token: str) -> RunningHub:
    hub = FakeHub(token=token)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.daemon_threads = True
    hub.url = f"http://127.0.0.1:{server.server_address[1]}/"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-hub", daemon=True
    )
    thread.start()
    return RunningHub(hub, server, thread)
