"""An engine's HTTP side with hostile /metrics bodies (issue 40 items 4, 5, 13), a real process.

usage: python _metrics_server.py PORT_FILE
Under each prefix the engine answers /v1/models (model "m") and /v1/completions at once; its
/metrics is what the prefix names:

  /inf    SGLang's serving families with a `+Inf` running gauge, a `NaN` queue, a 1e300 usage
          and an `Inf` bucket count, tokens that move between scrapes
  /plain  the same families with sane values (tokens move)
  /big    the serving families plus ~BIG_MB MiB of per-adapter families no serving figure names
          (the size comes after the prefix: /big3 is 3 MiB)
  /slow   sane values, but only after SLOW_S seconds of silence

GET /count/<prefix> says how many /metrics answers that prefix has had.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from http.server import ThreadingHTTPServer

from _hostile_http import announce  # beside this file

from tests.supervisor.test_waits import Idle  # PYTHONPATH: the repository (helpers.port_server)

SLOW_S = 30.0
SCRAPES: Counter[str] = Counter()
_lock = threading.Lock()


def _families(n: int, running: str = "1", waiting: str = "0", usage: str = "0.5", inf_bucket: bool = False) -> str:
    tokens = 1000 + 50 * n  # moves between scrapes: the engine is generating
    bucket = "+Inf" if inf_bucket else "3"
    return (
        "# TYPE sglang:generation_tokens_total counter\n"
        f'sglang:generation_tokens_total{{tp_rank="0"}} {tokens}\n'
        "# TYPE sglang:prompt_tokens_total counter\n"
        f'sglang:prompt_tokens_total{{tp_rank="0"}} {tokens * 4}\n'
        "# TYPE sglang:num_running_reqs gauge\n"
        f'sglang:num_running_reqs{{tp_rank="0"}} {running}\n'
        "# TYPE sglang:num_queue_reqs gauge\n"
        f'sglang:num_queue_reqs{{tp_rank="0"}} {waiting}\n'
        "# TYPE sglang:token_usage gauge\n"
        f'sglang:token_usage{{tp_rank="0"}} {usage}\n'
        "# TYPE sglang:time_to_first_token_seconds histogram\n"
        'sglang:time_to_first_token_seconds_bucket{le="0.1"} 1\n'
        f'sglang:time_to_first_token_seconds_bucket{{le="1.0"}} {bucket}\n'
        'sglang:time_to_first_token_seconds_bucket{le="+Inf"} 3\n'
        "sglang:time_to_first_token_seconds_sum 1.2\n"
        "sglang:time_to_first_token_seconds_count 3\n"
    )


def _padding(mib: int) -> str:
    """Per-adapter families (as per-LoRA labels multiply them): none is a serving figure."""
    lines = ["# TYPE sglang:lora_adapter_requests_total counter"]
    i = 0
    size = 0
    while size < mib << 20:
        line = f'sglang:lora_adapter_requests_total{{adapter="adapter-{i:07d}",tp_rank="{i % 64}"}} {i}.0'
        lines.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(lines) + "\n"


class Engine(Idle):
    """test_waits' idle engine (its model, its completion), with these /metrics bodies."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]  # a query string (Cockpit's `?by=cockpit`) is ignored, as engines do
        prefix, _, rest = path.lstrip("/").partition("/")
        if prefix == "count":
            with _lock:
                self._send(json.dumps({"scrapes": SCRAPES[rest]}).encode(), "application/json")
            return
        if rest != "metrics":
            self._send(json.dumps({"data": [{"id": "m"}]}).encode(), "application/json")
            return
        with _lock:
            SCRAPES[prefix] += 1
            n = SCRAPES[prefix]
        if prefix == "inf":
            body = _families(n, running="+Inf", waiting="NaN", usage="1e300", inf_bucket=True)
        elif prefix.startswith("big"):
            body = _families(n) + _padding(int(prefix[3:] or 3))
        elif prefix == "slow":
            time.sleep(SLOW_S)
            body = _families(n)
        else:
            body = _families(n)
        self._send(body.encode(), "text/plain; version=0.0.4")


def main() -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    httpd.daemon_threads = True
    announce(httpd.server_address[1], sys.argv[1])
    httpd.serve_forever()


if __name__ == "__main__":
    main()
