"""A stand-in inference engine for the launch tests: serves /health on --port after --delay seconds.

--die N: print a message and exit with code N instead; --ignore-term: ignore SIGTERM (to test SIGKILL);
--child-pid-file F: start a grandchild (sleeping) and write its pid to F (to test that the group is stopped).
"""

import argparse
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

if "--version" in sys.argv:  # as llama-server (on stderr) and text-generation-launcher print it
    if "launcher" in os.environ.get("FAKE_ENGINE_NAME", ""):
        print("text-generation-launcher 2.4.1")
    else:
        print("version: 4589 (1a2b3c4)\nbuilt with cc for x86_64-linux-gnu", file=sys.stderr)
    sys.exit(0)

parser = argparse.ArgumentParser()
parser.add_argument("--model")
parser.add_argument("--host", "--hostname", default="127.0.0.1")
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--delay", type=float, default=0.0)
parser.add_argument("--die", type=int)
parser.add_argument("--ignore-term", action="store_true")
parser.add_argument("--child-pid-file")
args, _ = parser.parse_known_args()

print(f"fake engine: serving {args.model} on {args.host}:{args.port}", flush=True)
print(f"fake engine: non-default args: {sys.argv[1:]}", flush=True)  # as vLLM echoes its arguments
if args.ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if args.child_pid_file:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(args.child_pid_file, "w") as fh:
        fh.write(str(child.pid))
if args.die is not None:
    print("fake engine: boom, cannot load the model", flush=True)
    sys.exit(args.die)
time.sleep(args.delay)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        body = b'{"version": "9.9.9"}' if self.path == "/version" else b"{}"
        self.send_response(200 if self.path in ("/health", "/version") else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


HTTPServer((args.host, args.port), Handler).serve_forever()
