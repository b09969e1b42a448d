"""The simulated SGLang main process: spawns one rank process per GPU, relays their collectives,
waits for them to be ready, then serves SGLang's HTTP API (stdlib only) and relays requests to TP0.

Process tree and exits follow SGLang: a scheduler exception SIGQUITs this process, which logs the
SIGQUIT line, SIGKILLs its children and then itself (exit 137). SIGTERM is a clean stop: the ranks
remove their GPU files and the main process exits 0.
"""

from __future__ import annotations

import contextlib
import faulthandler
import http.client
import json
import os
import queue
import re
import signal
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait
from typing import Any

from cockpit.sim import gpus
from cockpit.sim.clock import Clock
from cockpit.sim.sglang import crashes
from cockpit.sim.sglang.config import SimConfig
from cockpit.sim.sglang.logfmt import Log, resolved_server_args, server_args_line
from cockpit.sim.sglang.metrics import render_metrics
from cockpit.sim.sglang.rank import RankProcess
from cockpit.sim.uvicorn import UvicornHandler, status_text

WORDS = (" the", " of", " and", " to", " in", " a", " is", " that", " for", " it", " as", " with", " on", " was")


def count_tokens(text: str) -> int:
    """A tokenizer stand-in: words and punctuation, plus the BOS token."""
    return len(re.findall(r"\w+|[^\w\s]", text)) + 1


def fake_text(n: int, seed: str) -> str:
    h = sum(seed.encode()) if seed else 0
    return "".join(WORDS[(h + i * 7) % len(WORDS)] for i in range(n)).lstrip()


class SimServer:
    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.log = Log("")
        self.clock = Clock(cfg.speed, startup_speed=cfg.startup_speed)
        self.pid = os.getpid()
        self.n = cfg.local_ranks
        self.conns: list[Connection] = []
        self.send_locks = [threading.Lock() for _ in range(self.n)]
        self.pids: list[int] = []
        self.cv = threading.Condition()
        self.ready: dict[int, dict[str, Any]] = {}
        self.dead: set[int] = set()
        self.exit_codes: dict[int, int] = {}
        self.reduce: dict[str, dict[int, float]] = {}
        self.pending: dict[str, tuple[threading.Event, list[Any]]] = {}
        self.stats: dict[str, Any] = {}
        self.stats_seq = 0
        self.received_at = threading.local()  # per HTTP thread: when its request came in (sim time)
        self.streams: dict[str, queue.Queue[tuple[str, Any]]] = {}
        self.status = "Starting"  # SGLang's server status: Starting, Up, UnHealthy
        self.running_phase = False
        self.stopping = False
        self.httpd: ThreadingHTTPServer | None = None
        self.http_started = False
        self.started_wall = time.time()

    # ---- lifecycle ----
    def run(self) -> int:
        cfg = self.cfg
        signal.signal(signal.SIGQUIT, self._on_sigquit)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, self._on_sigterm)
        # `kill -USR1 <pid>` dumps every thread's stack to the log: for debugging the simulator
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        self.log.info(server_args_line(cfg))
        if cfg.new_format and cfg.args.get("disable_cuda_graph"):
            self.log.info(
                "'--disable-cuda-graph' is deprecated and will be removed in a future release. "
                "Use '--cuda-graph-backend-{decode,prefill}=disabled' instead."
            )
        cfg.sim_dir.mkdir(parents=True, exist_ok=True)
        gpus.prune_dead(cfg.sim_dir)
        count = max(cfg.opts.num_gpus or 0, 8, max(cfg.gpu_index(i) for i in range(self.n)) + 1)
        gpus.write_devices(cfg.sim_dir, cfg.gpu, count)
        host_gb = cfg.opts.host_mem_gb
        gpus.write_host(cfg.sim_dir, host_gb, host_gb, self.pid)
        self._spawn_ranks()
        threading.Thread(target=self._reader, name="rank-reader", daemon=True).start()
        if not self._wait_ready():
            return 1
        pinned = sum(float(info.get("hicache_gb") or 0) for info in self.ready.values())
        if pinned:
            gpus.write_host(cfg.sim_dir, host_gb, host_gb - pinned, self.pid)
        if cfg.node_rank > 0:
            return self._serve_dummy_health()
        return self._serve_http()

    def _spawn_ranks(self) -> None:
        child_ends: list[Connection] = []
        for _ in range(self.n):
            parent, child = Pipe(duplex=True)
            self.conns.append(parent)
            child_ends.append(child)
        for local in range(self.n):
            pid = os.fork()
            if pid == 0:  # the rank process
                # not the main process's handlers: a signal before the rank installs its own must
                # not make this copy of the main process act on its siblings
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
                    signal.signal(sig, signal.SIG_DFL)
                code = 0
                try:
                    for i, c in enumerate(self.conns):
                        c.close()
                        if i != local:
                            child_ends[i].close()
                    RankProcess(self.cfg, local, child_ends[local], self.clock, self.pid).run()
                except Exception:
                    # a bug in the simulator, not a simulated failure: say so on stderr
                    import traceback

                    traceback.print_exc()
                    code = 1
                except BaseException:
                    code = 1
                finally:
                    os._exit(code)
            self.pids.append(pid)
        for c in child_ends:
            c.close()

    def _reader(self) -> None:
        live: dict[Any, int] = {c: i for i, c in enumerate(self.conns)}
        while live:
            try:
                ready = wait(list(live), timeout=1.0)
            except OSError:
                return
            for c in ready:
                i = live[c]
                conn: Connection = self.conns[i]
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    del live[c]
                    self._on_rank_dead(i)
                    continue
                self._handle(i, msg)

    def send(self, local: int, msg: tuple[Any, ...]) -> None:
        with self.send_locks[local], contextlib.suppress(OSError, ValueError):
            self.conns[local].send(msg)

    def _handle(self, i: int, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "allreduce":
            _, tag, local, value = msg
            with self.cv:
                got = self.reduce.setdefault(tag, {})
                got[int(local)] = float(value)
                complete = len(got) == self.n
            if complete:
                result = ("allreduce_result", tag, min(got.values()), self.clock.now())
                for r in range(self.n):
                    self.send(r, result)
        elif kind == "ready":
            with self.cv:
                self.ready[int(msg[1])] = msg[2]
                self.cv.notify_all()
        elif kind == "bcast":
            _, targets, inner = msg
            for r in targets if targets is not None else range(self.n):
                self.send(int(r), inner)
        elif kind == "tok":
            _, rid, n = msg
            stream = self.streams.get(rid)
            if stream is not None:
                stream.put(("tok", int(n)))
        elif kind == "done":
            _, rid, result = msg
            with self.cv:
                waiter = self.pending.pop(rid, None)
                stream = self.streams.pop(rid, None)
            if stream is not None:
                stream.put(("done", result))
            if waiter is not None:
                waiter[1].append(result)
                waiter[0].set()
        elif kind == "stats":
            with self.cv:
                self.stats = msg[1]
                self.stats_seq += 1
                self.cv.notify_all()

    def _reap(self, local: int) -> int | None:
        if local in self.exit_codes:
            return self.exit_codes[local]
        try:
            _, status = os.waitpid(self.pids[local], 0)
        except ChildProcessError:
            return None
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        self.exit_codes[local] = code
        return code

    def _on_rank_dead(self, local: int) -> None:
        with self.cv:
            self.dead.add(local)
            self.cv.notify_all()
        if self.stopping or not self.running_phase:
            return
        if self.cfg.new_format:
            # 0.5.23's SubprocessWatchdog notices a dead scheduler and tears the server down
            code = self._reap(local)
            self.log.info(
                f"Subprocess scheduler_{local} (pid={self.pids[local]}) crashed with exit code {code}. "
                "Triggering SIGQUIT for cleanup..."
            )
            os.kill(self.pid, signal.SIGQUIT)
        else:
            # 0.5.9 has no watchdog: the server stays up without that scheduler (a zombie server)
            self.status = "UnHealthy"

    def _wait_ready(self) -> bool:
        for i in range(self.n):
            with self.cv:
                while i not in self.ready and i not in self.dead:
                    self.cv.wait(0.5)
                ok = i in self.ready
            if ok:
                continue
            code = self._reap(i)
            rank = self.cfg.first_rank + i
            if self.cfg.new_format:
                self.log.info(
                    f"Rank {rank} scheduler died during initialization (exit code: {code}). If exit code is -9 "
                    "(SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check."
                )
            else:
                self.log.info(f"Rank {rank} scheduler is dead. Please check if there are relevant logs.")
                self.log.info(f"Exit code: {code}")
                self.log.raw(crashes.crash_text("main-eof", self.cfg.version))
            self._kill_children(signal.SIGKILL)
            return False
        return True

    # ---- signals ----
    def _kill_children(self, sig: int) -> None:
        for pid in self.pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def _on_sigquit(self, signum: int, frame: Any) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self.running_phase:
            self.log.info("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        else:
            self.log.info("Received sigquit from a child process. It usually means the child failed.")
        if self.cfg.new_format and self.running_phase:
            # 0.5.23's dump_requests_before_crash (py-spy and CUDA-coredump dumps are on by default):
            # it sleeps in the handler, so the event loop, and /health with it, stops answering
            self.log.info("Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
            time.sleep(self.clock.real(5.0))
            with self.cv:
                none_left = len(self.dead) >= self.n
            if none_left:
                self.log.info("No live scheduler processes found; skipping py-spy and CUDA coredump.")
        if self.cfg.new_format:
            self.log.info(f"kill_process_tree called: parent_pid={self.pid}, include_parent=True, pid={self.pid}")
        # kill_process_tree(include_parent=True): the children, then ourselves (exit 137)
        self._kill_children(signal.SIGKILL)
        os.kill(self.pid, signal.SIGKILL)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self.http_started:
            self.log.uvicorn("Shutting down")
            self.log.uvicorn("Waiting for application shutdown.")
            self.log.uvicorn("Application shutdown complete.")
            self.log.uvicorn(f"Finished server process [{self.pid}]")
        self._kill_children(signal.SIGTERM)
        deadline = time.monotonic() + 5.0
        remaining = set(range(self.n))
        while remaining and time.monotonic() < deadline:
            for i in list(remaining):
                try:
                    done, _ = os.waitpid(self.pids[i], os.WNOHANG)
                except ChildProcessError:
                    done = self.pids[i]
                if done:
                    remaining.discard(i)
            time.sleep(0.02)
        for i in remaining:
            with contextlib.suppress(OSError):
                os.kill(self.pids[i], signal.SIGKILL)
        os._exit(0)

    # ---- HTTP ----
    def _serve_http(self) -> int:
        cfg = self.cfg
        self.log.uvicorn(f"Started server process [{self.pid}]")
        self.log.uvicorn("Waiting for application startup.")
        self.log.uvicorn("Application startup complete.")
        handler = _make_handler(self)
        try:
            self.httpd = _HTTPServer((cfg.host, cfg.port), handler)
        except OSError as exc:
            self.log.uvicorn(
                f"[Errno {exc.errno}] error while attempting to bind on address ('{cfg.host}', {cfg.port}): "
                f"{(exc.strerror or str(exc)).lower()}",
                level="ERROR",
            )
            self.log.uvicorn("Waiting for application shutdown.")
            self.log.uvicorn("Application shutdown complete.")
            self._kill_children(signal.SIGKILL)
            return 1
        self.httpd.daemon_threads = True
        self.http_started = True
        self.log.uvicorn(f"Uvicorn running on http://{cfg.host}:{cfg.port} (Press CTRL+C to quit)")
        threading.Thread(target=self._warmup, name="warmup", daemon=True).start()
        self.httpd.serve_forever(poll_interval=0.5)
        return 0

    def _warmup(self) -> None:
        cfg = self.cfg
        # uvicorn needs a moment before the warmup thread's first request; /health answers 503 meanwhile
        time.sleep(max(0.5, self.clock.real(1.0)))
        host = "127.0.0.1" if cfg.host in ("0.0.0.0", "::", "") else cfg.host
        if not cfg.skip_warmup:
            try:
                for _ in range(120):
                    conn = http.client.HTTPConnection(host, cfg.port, timeout=30)
                    conn.request("GET", "/model_info")
                    if conn.getresponse().status == 200:
                        break
                    time.sleep(1)
                conn = http.client.HTTPConnection(host, cfg.port, timeout=600)
                body = json.dumps({"text": "The capital city of France is", "sampling_params": {"temperature": 0, "max_new_tokens": 8}})
                conn.request("POST", "/generate", body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"warmup /generate returned {resp.status}")
            except Exception as exc:
                self.log.info(f"Initialization failed. warmup error: {exc!r}")
                os.kill(self.pid, signal.SIGQUIT)
                return
        self.clock.serving()  # from here on at --sim-speed (a --sim-startup-speed ends here)
        self.status = "Up"
        self.running_phase = True
        self.log.info("The server is fired up and ready to roll!")
        self.send(0, ("traffic", self.clock.now()))

    def submit(self, prompt_tokens: int, max_new: int) -> dict[str, Any]:
        rid = uuid.uuid4().hex
        ev = threading.Event()
        box: list[Any] = []
        with self.cv:
            self.pending[rid] = (ev, box)
        self.send(0, ("req", rid, prompt_tokens, max_new, 0, False, self._arrival()))
        start = time.monotonic()
        while not ev.wait(1.0):
            if 0 in self.dead or time.monotonic() - start > 3600:
                with self.cv:
                    self.pending.pop(rid, None)
                # a server-side failure, never the client's: before this said nothing and the
                # handler answered 400, so a scheduler killed during warmup (e.g. by a second
                # simulator sharing the GPU directory, killing "foreign" GPU holders) read as
                # "warmup /generate returned 400"
                if 0 in self.dead:
                    return {"error": "the scheduler (rank 0) is dead", "status": 503}
                return {"error": "the scheduler is not responding", "status": 503}
        result: dict[str, Any] = box[0]
        result["rid"] = rid
        return result

    def _arrival(self) -> float:
        t = getattr(self.received_at, "t", None)
        self.received_at.t = None
        return float(t) if t is not None else self.clock.now()

    def submit_stream(self, prompt_tokens: int, max_new: int) -> queue.Queue[tuple[str, Any]]:
        """A streaming request: the queue receives ("tok", tokens so far) as TP0 produces them (at
        their simulated times), then ("done", result); ("done", {"error": …}) if TP0 is gone."""
        rid = uuid.uuid4().hex
        q: queue.Queue[tuple[str, Any]] = queue.Queue()
        with self.cv:
            self.streams[rid] = q
        self.send(0, ("req", rid, prompt_tokens, max_new, 0, True, self._arrival()))
        q.put(("rid", rid))
        return q

    def fresh_stats(self, timeout: float = 0.5) -> dict[str, Any]:
        """TP0's counters as of now (a scrape must see every request that has been answered)."""
        with self.cv:
            seen = self.stats_seq
        self.send(0, ("stats_req",))
        deadline = time.monotonic() + timeout
        with self.cv:
            while self.stats_seq == seen and 0 not in self.dead:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cv.wait(left)
            return self.stats

    def _serve_dummy_health(self) -> int:
        """Node rank >= 1 serves no API; a dummy /health that always answers 200 (as SGLang does)."""
        cfg = self.cfg

        class Dummy(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code = 200 if self.path.split("?")[0] in ("/health", "/health_generate", "/ping") else 404
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        try:
            if _held_here(cfg.host, cfg.port, wait_s=5.0):
                # node 0 of this job runs on this same machine (the tests' loopback hosts): its API
                # is coming up on this port; taking it first would make node 0 fail to bind
                raise OSError(98, "held by node 0 on this machine")
            self.httpd = ThreadingHTTPServer((cfg.host, cfg.port), Dummy)
        except OSError as exc:
            # Several simulated nodes on one machine share its ports: node 0's API already holds
            # this one. Nothing trusts a node >= 1 /health anyway, so keep the ranks serving.
            # (worded so that it reads as no crash signature: the port is simply someone else's)
            _stderr_line(f"[sim] node {cfg.node_rank}: no dummy health server, port {cfg.port} is held by another node (errno {exc.errno})")
            while True:
                time.sleep(0.5)
        self.httpd.serve_forever(poll_interval=0.5)
        return 0

    def server_info(self) -> dict[str, Any]:
        cfg = self.cfg
        info0 = self.ready.get(0, {})
        args = {k: v for k, v in resolved_server_args(cfg).items() if _jsonable(v)}
        mem = {
            "weight": info0.get("weight"),
            "kvcache": info0.get("kvcache"),
            "token_capacity": info0.get("token_capacity"),
            "graph": info0.get("graph"),
        }
        state: dict[str, Any] = {
            "last_gen_throughput": self.stats.get("gen_throughput", 0.0),
            "memory_usage": mem,
            "effective_max_running_requests_per_dp": info0.get("max_running_requests"),
        }
        if cfg.new_format:
            mem["startup_available"] = info0.get("startup_available")
            mem["token_capacity_swa"] = None
            mem["graph"] = {"prefill": info0.get("graph_prefill"), "decode": info0.get("graph_decode")}
            state["world_size"] = cfg.world_size
            state["startup_time"] = info0.get("startup_time")
        sched = {"max_total_num_tokens": info0.get("token_capacity"), "max_req_input_len": cfg.context_len - 1}
        if cfg.new_format:
            # 0.5.23's build_server_info merges the scheduler's init info into the top level
            # (srt/utils/common.py; managers/scheduler.py get_init_info), beside `startup_time`
            return {**args, **sched, "startup_time": info0.get("startup_time"),
                    "version": cfg.version, "frontend": "python", "internal_states": [state]}
        return {**args, "scheduler_info": sched, "version": cfg.version, "internal_states": [state]}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # uvicorn's backlog (2048): with socketserver's 5, a load test's burst of connections loses SYNs
    # and its clients wait a second for the retransmit
    request_queue_size = 2048

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that went away mid-answer is routine; anything else gets one uvicorn-style line
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        Log("").uvicorn(f"Exception in ASGI application: {exc!r}", level="ERROR")


def _positive_int(v: Any, default: int) -> int:
    try:
        return max(1, int(v)) if v is not None else default
    except (TypeError, ValueError):
        return default


def _prompt_tokens(ids: Any, text: Any) -> int:
    """Token ids count as given (what load generators send); text goes through the tokenizer stand-in."""
    if isinstance(ids, list) and ids and all(isinstance(x, int) for x in ids):
        return len(ids)
    return count_tokens(str(text or ""))


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


def _make_handler(server: SimServer) -> type[BaseHTTPRequestHandler]:
    cfg = server.cfg

    class Handler(UvicornHandler):
        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            code_text = status_text(code)
            client = f"{self.client_address[0]}:{self.client_address[1]}"
            server.log.uvicorn(f'{client} - "{self.command} {self.path} {self.request_version}" {code_text}')

        def _reply(self, code: int, body: Any = None, content_type: str = "application/json") -> None:
            if body is None:
                data = b""
            elif isinstance(body, (bytes, str)):
                data = body.encode() if isinstance(body, str) else body
            else:
                data = json.dumps(body).encode()
            self.send_response(code)
            if data or body is not None:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(data)

        def _not_found(self) -> None:
            self._reply(404, {"detail": "Not Found"})

        def _body(self) -> dict[str, Any]:
            try:
                n = max(0, int(self.headers.get("Content-Length") or 0))
            except ValueError:
                n = 0
            raw = self.rfile.read(n) if n else b""
            try:
                data = json.loads(raw or b"{}")
            except ValueError:
                data = None
            return data if isinstance(data, dict) else {}

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate"):
                if server.stopping:
                    server.log.info("Health check request received during shutdown. Returning 503.")
                    return self._reply(503, None)
                if server.status == "Starting":
                    return self._reply(503, None)
                if server.dead:
                    timeout = 20.0
                    time.sleep(max(0.05, server.clock.real(timeout)))
                    server.log.info(
                        "Health check failed. Server couldn't get a response from detokenizer for last "
                        f"{timeout:g} seconds. tic start time: {time.time() - timeout:.0f}. last_heartbeat time: "
                        f"{server.started_wall:.0f}"
                    )
                    server.status = "UnHealthy"
                    return self._reply(503, None)
                # a real /health runs a one-token generation and checks for output once a second
                if os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").lower() not in ("0", "false"):
                    time.sleep(max(0.05, server.clock.real(1.0)))
                server.status = "Up"
                return self._reply(200, None)
            if path == "/ready" and cfg.new_format:
                ok = server.status == "Up" and not server.stopping
                return self._reply(200 if ok else 503, {"status": "ready" if ok else "not ready"})
            if path == "/ping":
                if cfg.new_format and server.status != "Up":
                    return self._reply(503, None)
                return self._reply(200, None)
            if path in ("/model_info", "/get_model_info"):
                return self._reply(200, {
                    "model_path": cfg.model_path,
                    "tokenizer_path": cfg.args.get("tokenizer_path") or cfg.model_path,
                    "is_generation": True,
                    "preferred_sampling_params": None,
                    "weight_version": "default",
                    "has_image_understanding": False,
                    "has_audio_understanding": False,
                    "model_type": cfg.model.model_type,
                    "architectures": [cfg.model.architecture],
                })
            if path == "/v1/models":
                return self._reply(200, {"object": "list", "data": [{
                    "id": cfg.served_model_name, "object": "model", "created": int(server.started_wall),
                    "owned_by": "sglang", "root": cfg.model_path, "max_model_len": cfg.context_len}]})
            if path in ("/server_info", "/get_server_info"):
                if path == "/get_server_info" and cfg.new_format:
                    server.log.info("Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                                    "Please use '/server_info' instead.")
                return self._reply(200, server.server_info())
            if path == "/metrics" and cfg.enable_metrics:
                stats = server.fresh_stats() if server.running_phase else server.stats
                text = render_metrics(cfg, stats, server.ready.get(0, {}), server.started_wall)
                return self._reply(200, text, "text/plain; version=0.0.4; charset=utf-8")
            return self._not_found()

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            server.received_at.t = server.clock.now()  # the request's arrival, before its body is read
            body = self._body()
            if path == "/generate":
                return self._generate(body)
            if path in ("/v1/chat/completions", "/v1/completions"):
                return self._openai(path, body)
            if path == "/flush_cache":
                return self._reply(200, "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n", "text/plain")
            return self._not_found()

        def _generate(self, body: dict[str, Any]) -> None:
            sp = body.get("sampling_params") or {}
            max_new = _positive_int(sp.get("max_new_tokens") if isinstance(sp, dict) else None, 128)
            prompt = _prompt_tokens(body.get("input_ids"), body.get("text"))

            def meta(rid: str, n: int, r: dict[str, Any] | None) -> dict[str, Any]:
                m: dict[str, Any] = {"id": rid, "finish_reason": None if r is None else {"type": "length", "length": n},
                                     "prompt_tokens": prompt if r is None else r["prompt_tokens"],
                                     "completion_tokens": n, "cached_tokens": 0 if r is None else r.get("cached_tokens", 0)}
                if r is not None:
                    m["e2e_latency"] = round(float(r["e2e_latency"]), 4)
                return m

            if body.get("stream"):
                # SGLang streams the whole text so far in every chunk (not only the new part)
                def chunk(rid: str, n: int, r: dict[str, Any] | None) -> list[dict[str, Any]]:
                    return [{"text": fake_text(n, rid), "meta_info": meta(rid, n, r)}]

                return self._stream(prompt, max_new, chunk, openai=False)
            r = server.submit(prompt, max_new)
            if r.get("error"):
                return self._reply(int(r.get("status") or 400), {"error": {"message": r["error"]}})
            n = int(r["completion_tokens"])
            return self._reply(200, {"text": fake_text(n, r["rid"]), "meta_info": meta(r["rid"], n, r)})

        def _openai(self, path: str, body: dict[str, Any]) -> None:
            max_new = _positive_int(body.get("max_completion_tokens") or body.get("max_tokens"), 128)
            chat = path.endswith("chat/completions")
            if chat:
                msgs = body.get("messages") or []
                text = " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
                prompt = count_tokens(text) + 4 * max(1, len(msgs))
            else:
                prompt = _prompt_tokens(body.get("prompt"), body.get("prompt"))
            created = int(time.time())
            model = body.get("model") or cfg.served_model_name
            raw_opts = body.get("stream_options")
            opts: dict[str, Any] = raw_opts if isinstance(raw_opts, dict) else {}

            def usage(n: int, p: int) -> dict[str, int]:
                return {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}

            if body.get("stream"):
                sent = [0]

                def chunk(rid: str, n: int, r: dict[str, Any] | None) -> list[dict[str, Any]]:
                    delta = fake_text(n - sent[0], rid + str(sent[0]))
                    sent[0] = n
                    finish = None if r is None else "length"
                    if chat:
                        choice: dict[str, Any] = {"index": 0, "delta": {"role": "assistant", "content": delta},
                                                  "finish_reason": finish}
                        obj = "chat.completion.chunk"
                    else:
                        choice = {"index": 0, "text": delta, "logprobs": None, "finish_reason": finish}
                        obj = "text_completion"
                    p = prompt if r is None else int(r["prompt_tokens"])
                    out: list[dict[str, Any]] = [{"id": rid, "object": obj, "created": created, "model": model,
                                                  "choices": [choice],
                                                  "usage": usage(n, p) if opts.get("continuous_usage_stats") else None}]
                    if r is not None and opts.get("include_usage"):
                        out.append({"id": rid, "object": obj, "created": created, "model": model, "choices": [],
                                    "usage": usage(n, p)})
                    return out

                return self._stream(prompt, max_new, chunk, openai=True)
            r = server.submit(prompt, max_new)
            if r.get("error"):
                return self._openai_error(r)
            n = int(r["completion_tokens"])
            text = fake_text(n, r["rid"])
            if chat:
                out = {"id": r["rid"], "object": "chat.completion", "created": created, "model": model,
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "length"}], "usage": usage(n, r["prompt_tokens"])}
            else:
                out = {"id": r["rid"], "object": "text_completion", "created": created, "model": model,
                       "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                       "usage": usage(n, r["prompt_tokens"])}
            return self._reply(200, out)

        def _openai_error(self, r: dict[str, Any]) -> None:
            code = int(r.get("status") or 400)
            kind = "BadRequestError" if code == 400 else "InternalServerError"
            return self._reply(code, {"object": "error", "message": r["error"], "type": kind, "code": code})

        def _stream(self, prompt: int, max_new: int, chunk: Any, *, openai: bool) -> None:
            """Server-sent events as TP0 produces tokens (chunked transfer encoding, as uvicorn)."""
            q = server.submit_stream(prompt, max_new)
            rid = str(q.get()[1])
            started = False
            while True:
                try:
                    kind, value = q.get(timeout=1.0)
                except queue.Empty:
                    if 0 in server.dead or server.stopping:
                        kind, value = "done", {"error": "the scheduler is not responding", "status": 500}
                    else:
                        continue
                if kind == "done" and value.get("error") and not started:
                    # refused before the first token (input too long): a plain error answer
                    if openai:
                        return self._openai_error(value)
                    return self._reply(int(value.get("status") or 400), {"error": {"message": value["error"]}})
                if not started:
                    started = True
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                if kind == "done" and value.get("error"):
                    events = [{"error": {"message": value["error"]}}] if not openai else [
                        {"object": "error", "message": value["error"], "code": int(value.get("status") or 500)}]
                elif kind == "done":
                    events = chunk(rid, int(value["completion_tokens"]), value)
                else:
                    events = chunk(rid, int(value), None)
                data = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
                if kind == "done":
                    data += "data: [DONE]\n\n"
                try:
                    self._write_chunk(data.encode())
                    if kind == "done":
                        self._write_chunk(b"")
                except OSError:
                    self.close_connection = True
                    return
                if kind == "done":
                    return

        def _write_chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


def run_server(cfg: SimConfig) -> int:
    return SimServer(cfg).run()


def _stderr_line(text: str) -> None:
    """One unprefixed line on stderr, written whole (as a real process's stray output would be)."""
    os.write(2, (text + "\n").encode())


def _held_here(host: str, port: int, *, wait_s: float) -> bool:
    """Does a server on this machine hold `port` within `wait_s` seconds? Only a simulated node that
    shares a machine with node 0 ever sees one; on a machine of its own nothing answers."""
    addr = "127.0.0.1" if host in ("", "0.0.0.0") else host
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with socket.create_connection((addr, port), timeout=0.2):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
