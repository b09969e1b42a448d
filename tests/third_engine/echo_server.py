"""The tests' third engine: an HTTP echo server with a log grammar of its own (stdlib only).

    python echo_server.py --port N [--greeting TEXT]

Its log (standard output, one record a line, `ECHO|<time>|<what>`):

    ECHO|2026-12-01 18:40:00|boot pid=123
    ECHO|2026-12-01 18:40:00|args {"port": 4567, "greeting": "hi"}
    ECHO|2026-12-01 18:40:00|listening on 127.0.0.1:4567
    ECHO|2026-12-01 18:40:01|echo 5 bytes
    ECHO|2026-12-01 18:40:09|PANIC signal 15: terminated from outside

GET /alive answers 200 once it listens; POST /echo answers the body back. SIGTERM or SIGINT makes
it print its PANIC record and exit 3 (the engine's way of dying, not a clean stop).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType


def log(what: str) -> None:
    sys.stdout.write(f"ECHO|{time.strftime('%Y-%m-%d %H:%M:%S')}|{what}\n")
    sys.stdout.flush()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = 200 if self.path.split("?", 1)[0] == "/alive" else 404  # a query string is ignored, as engines do
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        log(f"echo {len(body)} bytes")
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # access lines are not part of the grammar


def main() -> int:
    p = argparse.ArgumentParser(prog="echo_server")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--greeting", default="hello")
    args = p.parse_args()
    log(f"boot pid={os.getpid()}")
    log("args " + json.dumps(vars(args), sort_keys=True))

    def panic(signum: int, frame: FrameType | None) -> None:
        log(f"PANIC signal {signum}: terminated from outside")
        os._exit(3)

    signal.signal(signal.SIGTERM, panic)
    signal.signal(signal.SIGINT, panic)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    log(f"listening on 127.0.0.1:{args.port}")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
