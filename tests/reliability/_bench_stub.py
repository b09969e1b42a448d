"""A hostile inference server for `cockpit bench`'s load generator: stdlib HTTP on a free loopback
port, its own process (so that its work never shares the client's interpreter).

usage: python _bench_stub.py [--metrics normal|inf|huge|slowloris] [--models normal|slowloris]
                             [--sse normal|endless-line|huge-count] [--error-body huge]
Prints its port on stdout once it listens. Streams `/v1/completions` as vLLM does (an event per
token with continuous usage): first token after TTFT_S, then one every ITL_S.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TTFT_S = 0.020
ITL_S = 0.005
PREFIX = "sglang:"


def metrics_body(mode: str, served: int) -> bytes:
    lines = [
        f"# TYPE {PREFIX}num_running_reqs gauge", f"{PREFIX}num_running_reqs 1",
        f"# TYPE {PREFIX}token_usage gauge", f"{PREFIX}token_usage 0.25",
        f"# TYPE {PREFIX}generation_tokens_total counter", f"{PREFIX}generation_tokens_total {served}",
        f"# TYPE {PREFIX}max_total_num_tokens gauge", f"{PREFIX}max_total_num_tokens 100000",
        f"# TYPE {PREFIX}inter_token_latency_seconds histogram",
        f'{PREFIX}inter_token_latency_seconds_bucket{{le="0.01"}} {served}',
        f'{PREFIX}inter_token_latency_seconds_bucket{{le="+Inf"}} {served}',
        f"{PREFIX}inter_token_latency_seconds_sum {served * ITL_S}",
        f"{PREFIX}inter_token_latency_seconds_count {served}",
    ]
    if mode == "inf":
        lines += [f"{PREFIX}max_total_num_tokens +Inf", f"{PREFIX}token_usage NaN",
                  f"{PREFIX}time_to_first_token_seconds_sum +Inf", f"{PREFIX}time_to_first_token_seconds_count 3",
                  f"{PREFIX}e2e_request_latency_seconds_sum -Inf", f"{PREFIX}e2e_request_latency_seconds_count +Inf",
                  f"{PREFIX}num_queue_reqs 1e400"]
    if mode == "huge":  # 2 MB of well-formed samples the client must fold
        lines += [f'{PREFIX}num_running_reqs{{rank="{i}"}} 1' for i in range(2 * 2**20 // 32)]
    return ("\n".join(lines) + "\n").encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    opts: argparse.Namespace
    served = 0

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _slowloris(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(10**9))
        self.end_headers()
        try:
            while True:  # a byte a second: every read succeeds, the body never ends
                self.wfile.write(b"#")
                self.wfile.flush()
                time.sleep(1.0)
        except OSError:
            return

    def _send(self, body: bytes, ctype: str = "application/json", status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.path = self.path.split("?", 1)[0]  # a query string is ignored, as engines do
        if self.path == "/metrics":
            if self.opts.metrics == "slowloris":
                return self._slowloris()
            return self._send(metrics_body(self.opts.metrics, Handler.served), "text/plain; version=0.0.4")
        if self.path == "/v1/models":
            if self.opts.models == "slowloris":
                return self._slowloris()
            return self._send(json.dumps({"object": "list", "data": [
                {"id": "stub", "object": "model", "max_model_len": 4096}]}).encode())
        if self.path == "/health":
            return self._send(b"")
        self._send(b"{}", status=404)

    def _event(self, obj: dict[str, object]) -> None:
        data = b"data: " + json.dumps(obj).encode() + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.opts.error_body == "huge":
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b'{"error": {"message": "' + b"x" * 65536
            try:
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:
                return
        n = int(body.get("max_tokens", 16))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            time.sleep(TTFT_S)
            if self.opts.sse == "endless-line":
                chunk = b"data: " + b"y" * 65536
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            for k in range(1, n + 1):
                count = 10**12 if self.opts.sse == "huge-count" else k
                self._event({"object": "text_completion", "choices": [{"index": 0, "text": "x"}],
                             "usage": {"prompt_tokens": 8, "completion_tokens": count, "total_tokens": 8 + count}})
                Handler.served += 1
                if k < n:
                    time.sleep(ITL_S)
            data = b"data: [DONE]\n\n"
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
            self.wfile.flush()
        except OSError:
            return


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--metrics", default="normal")
    p.add_argument("--models", default="normal")
    p.add_argument("--sse", default="normal")
    p.add_argument("--error-body", default="")
    Handler.opts = p.parse_args()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    print(httpd.server_address[1], flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
    sys.exit(0)
