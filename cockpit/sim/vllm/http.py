"""The vLLM simulator's HTTP API: the routes an operator and Cockpit call, with vLLM's answers.

`/health` (200 empty; 503 once the engine died), `/version`, `/v1/models`, `/v1/completions`,
`/v1/chat/completions` and `/metrics` in Prometheus text with vLLM's `vllm:` names and labels
(`model_name`, `engine`); `vllm:kv_cache_usage_perc` is a fraction, as vLLM exports it.

`stream: true` answers as vLLM's OpenAI server does: `text/event-stream`, one `data: {…}` event per
token, one decode step apart, as the engine produces them (no event before the first token), `usage` in each when
`stream_options` asks for `include_usage` and `continuous_usage_stats`, a usage-only event
(`choices: []`) at the end with `include_usage`, an error event if the engine dies, then
`data: [DONE]`. A chat stream opens with the assistant's role and an empty content.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol

from cockpit.sim.clock import Clock
from cockpit.sim.histogram import exposition
from cockpit.sim.uvicorn import UvicornHandler, status_text
from cockpit.sim.vllm.config import VllmSimConfig
from cockpit.sim.vllm.engine import DECODE_TOKENS_PER_S, E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS, Engine, Req


class VllmSim(Protocol):
    """What the routes read of the simulated server (server.py's VllmSim, which starts them): named
    here as a protocol so that the server imports its routes and the routes never the server."""

    cfg: VllmSimConfig
    clock: Clock
    engine: Engine | None
    dead: bool
    started_wall: float

    def access(self, client: str, method: str, path: str, status: str) -> None: ...

WORDS = (" the", " cockpit", " reads", " every", " log", " line", " and", " keeps", " the", " GPUs", " honest", ".")
STREAM_WAIT_S = 0.5  # real seconds a stream waits for the next engine step before it looks at the engine again


def token_text(i: int) -> str:
    """The i-th generated token's text; the tokens of one answer joined are its whole text."""
    word = WORDS[i % len(WORDS)]
    return word.lstrip() if i == 0 else word


def count_tokens(text: str) -> int:
    return max(1, round(len(text.split()) * 1.3))


def render_metrics(sim: VllmSim, eng: Engine | None) -> str:
    cfg = sim.cfg
    lab = f'engine="0",model_name="{cfg.served_model_name}"'
    out: list[str] = []

    def metric(name: str, kind: str, help_: str, value: float, labels: str = lab) -> None:
        out.extend([f"# HELP vllm:{name} {help_}", f"# TYPE vllm:{name} {kind}", f"vllm:{name}{{{labels}}} {float(value)}"])

    running = len(eng.running) if eng else 0
    waiting = len(eng.waiting) if eng else 0
    metric("num_requests_running", "gauge", "Number of requests in model execution batches.", running)
    metric("num_requests_waiting", "gauge", "Number of requests waiting to be processed.", waiting)
    metric("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", eng.usage() if eng else 0.0)
    blocks = (eng.capacity // 16) if eng else 0
    info = (f'block_size="16",cache_dtype="{cfg.args.get("kv_cache_dtype") or "auto"}",'
            f'enable_prefix_caching="True",engine="0",gpu_memory_utilization="{cfg.util}",num_gpu_blocks="{blocks}"')
    metric("cache_config_info", "gauge", "Information of the LLMEngine CacheConfig", 1.0, info)
    metric("num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", eng.preemptions if eng else 0)
    metric("prompt_tokens_total", "counter", "Number of prefill tokens processed.", eng.prompt_total if eng else 0)
    metric("generation_tokens_total", "counter", "Number of generation tokens processed.", int(eng.gen_total) if eng else 0)
    metric("prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.",
           eng.queries if eng else 0)
    metric("prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", eng.hits if eng else 0)
    metric("request_success_total", "counter", "Count of successfully processed requests.", eng.success if eng else 0,
           lab + ',finished_reason="length"')
    hists = (
        ("time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS,
         eng.ttft.counts if eng else None, eng.ttft.total if eng else 0.0),
        ("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS,
         eng.itl.counts if eng else None, eng.itl.total if eng else 0.0),
        ("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", E2E_BUCKETS,
         eng.e2e.counts if eng else None, eng.e2e.total if eng else 0.0),
    )
    for name, help_, bounds, counts, total_s in hists:
        out += exposition(f"vllm:{name}", help_, bounds, counts, total_s, lab)
    return "\n".join(out) + "\n"


def make_handler(sim: VllmSim) -> type[BaseHTTPRequestHandler]:
    cfg = sim.cfg

    class Handler(UvicornHandler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            sim.access(f"{self.client_address[0]}:{self.client_address[1]}", self.command, self.path, status_text(code))

        def _reply(self, code: int, body: Any = None, ctype: str = "application/json") -> None:
            data = b"" if body is None else body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            if body is not None:
                self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            try:
                n = max(0, int(self.headers.get("Content-Length") or 0))
                data = json.loads(self.rfile.read(n) or b"{}") if n else {}
            except ValueError:
                data = None
            return data if isinstance(data, dict) else {}

        def _authorised(self) -> bool:
            # as vLLM's API server: `--api-key`, else the VLLM_API_KEY environment variable
            key = cfg.args.get("api_key") or os.environ.get("VLLM_API_KEY")
            if not key or self.headers.get("Authorization") == f"Bearer {key}":
                return True
            self._reply(401, {"error": "Unauthorized"})
            return False

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/ping"):
                return self._reply(503 if sim.dead else 200, None)
            if path == "/version":
                return self._reply(200, {"version": cfg.version})
            if path == "/load":
                return self._reply(200, {"server_load": len(sim.engine.running) if sim.engine else 0})
            if path == "/metrics":
                return self._reply(200, render_metrics(sim, sim.engine), "text/plain; version=0.0.4; charset=utf-8")
            if path == "/v1/models":
                if not self._authorised():
                    return None
                return self._reply(200, {"object": "list", "data": [{
                    "id": cfg.served_model_name, "object": "model", "created": int(sim.started_wall), "owned_by": "vllm",
                    "root": cfg.model_name, "parent": None, "max_model_len": cfg.max_model_len}]})
            return self._reply(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            body = self._body()
            if path not in ("/v1/completions", "/v1/chat/completions"):
                return self._reply(404, {"detail": "Not Found"})
            if not self._authorised():
                return None
            eng = sim.engine
            if eng is None or sim.dead:
                return self._reply(500, {"error": {"message": "The server had an error while processing your request.",
                                                   "type": "InternalServerError", "code": 500}})
            if path.endswith("chat/completions"):
                msgs = body.get("messages") or []
                prompt = " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
            else:
                p = body.get("prompt", "")
                prompt = " ".join(map(str, p)) if isinstance(p, list) else str(p)
            try:
                max_new = int(body.get("max_tokens") or 16)
            except (TypeError, ValueError):
                return self._reply(400, {"error": {"message": "max_tokens must be an integer", "type": "BadRequestError",
                                                   "code": 400}})
            n_prompt = count_tokens(prompt)
            if n_prompt + max_new > cfg.max_model_len:
                return self._reply(400, {"error": {"message": f"This model's maximum context length is {cfg.max_model_len} "
                                                   f"tokens. However, you requested {n_prompt + max_new} tokens.",
                                                   "type": "BadRequestError", "code": 400}})
            model = body.get("model") or cfg.served_model_name
            created = int(time.time())
            chat = path.endswith("chat/completions")
            req = eng.add(n_prompt, max_new)
            if body.get("stream"):
                opts = body.get("stream_options")
                return self._stream(eng, req, chat=chat, model=model, created=created,
                                    opts=opts if isinstance(opts, dict) else {})
            deadline = time.monotonic() + 300
            while not req.finished.wait(0.2):
                if sim.dead or time.monotonic() > deadline:
                    return self._reply(500, {"error": {"message": "The server had an error while processing your request.",
                                                       "type": "InternalServerError", "code": 500}})
            text = "".join(token_text(i) for i in range(max_new))
            usage = {"prompt_tokens": n_prompt, "completion_tokens": max_new, "total_tokens": n_prompt + max_new}
            if chat:
                out = {"id": f"chat{req.rid}", "object": "chat.completion", "created": created, "model": model,
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
                       "usage": usage}
            else:
                out = {"id": req.rid, "object": "text_completion", "created": created, "model": model,
                       "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}], "usage": usage}
            return self._reply(200, out)

        def _stream(self, eng: Engine, req: Req, *, chat: bool, model: str, created: int, opts: dict[str, Any]) -> None:
            """Server-sent events, in chunked transfer encoding, as the engine's steps produce tokens.

            vLLM starts its streaming response at once, so a failure after admission arrives as an
            error event inside the stream (HTTP 200), never as an error status."""
            include_usage = bool(opts.get("include_usage"))
            continuous = include_usage and bool(opts.get("continuous_usage_stats"))  # vLLM needs both
            rid = f"chat{req.rid}" if chat else req.rid
            obj = "chat.completion.chunk" if chat else "text_completion"

            def usage(n: int) -> dict[str, int]:
                return {"prompt_tokens": req.prompt, "completion_tokens": n, "total_tokens": req.prompt + n}

            def event(choice: dict[str, Any], n: int) -> str:
                e: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice]}
                if continuous:
                    e["usage"] = usage(n)
                return f"data: {json.dumps(e)}\n\n"

            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            # The fluid engine makes a request's tokens a tick (0.25 simulated s) at a time; vLLM makes
            # one per engine step. Each token goes out a decode step after the previous one, so that
            # a client measures the inter-token gap the engine's decode rate means (the last one
            # leaves up to a tick after the engine finished the request).
            step_s = sim.clock.real(1 / DECODE_TOKENS_PER_S)
            due = 0.0
            sent = 0
            deadline = time.monotonic() + 300
            try:
                while True:
                    with eng.stepped:
                        while (int(req.generated) == sent and not req.finished.is_set() and not sim.dead
                               and time.monotonic() < deadline):
                            eng.stepped.wait(STREAM_WAIT_S)
                        n, done = int(req.generated), req.finished.is_set()
                    events: list[str] = []
                    if chat and sent == 0 and n > 0:  # vLLM's first chat event: the role, no text yet
                        events.append(event({"index": 0, "delta": {"role": "assistant", "content": ""},
                                             "logprobs": None, "finish_reason": None}, 0))
                    for i in range(sent, n):
                        due = max(due + step_s, time.monotonic()) if i else time.monotonic()
                        if due - time.monotonic() > 0.001:  # what is due goes out now, then wait for this one
                            if events:
                                self._write_chunk("".join(events).encode())
                                events = []
                            # re-read the clock: writing took time, and a negative sleep raises (under load
                            # it did, and the stream broke off mid-body)
                            time.sleep(max(0.0, due - time.monotonic()))
                        finish = "length" if done and i == n - 1 else None
                        if chat:
                            choice = {"index": 0, "delta": {"content": token_text(i)}, "logprobs": None,
                                      "finish_reason": finish}
                        else:
                            choice = {"index": 0, "text": token_text(i), "logprobs": None, "finish_reason": finish,
                                      "stop_reason": None}
                        events.append(event(choice, i + 1))
                    sent = n
                    failed = not done and (sim.dead or time.monotonic() >= deadline)
                    if failed:
                        events.append("data: " + json.dumps({"error": {
                            "message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                            "type": "InternalServerError", "param": None, "code": 500}}) + "\n\n")
                    elif done and include_usage:
                        events.append("data: " + json.dumps({"id": rid, "object": obj, "created": created, "model": model,
                                                             "choices": [], "usage": usage(n)}) + "\n\n")
                    if done or failed:
                        events.append("data: [DONE]\n\n")
                    if events:
                        self._write_chunk("".join(events).encode())
                    if done or failed:
                        self._write_chunk(b"")  # the chunked body's end
                        return
            except OSError:  # the client went away; the engine finishes the request regardless
                self.close_connection = True

        def _write_chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler
