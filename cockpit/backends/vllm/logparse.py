"""vLLM's log grammar (0.10 through 0.33, shared/reference/vllm.md §2, §3, §7, §8) -> core events.

A record is `[(<process> pid=<pid>) ]*LEVEL MM-DD HH:MM:SS [file.py:line] msg`: zero or more
process groups (stacked in ≤0.30 and under Ray; the innermost worker group names the rank), no
year, no milliseconds. In 0.31+ tqdm bars, uvicorn lines and the tracebacks after
`Process EngineCore:` are bare; in ≤0.30 they carry the writer's process group but no level.
Every wrapper the operator's tooling adds in front (docker compose `svc  | `, Kubernetes CRI
`<time> stdout F `, `srun -l` `0: `, journald) is learnt from a line that holds a vLLM record and
stripped from the lines after it.

Rank labels follow the core's convention: `TP3`, `PP1 TP0`, `DP1 TP3` (`Worker_DP1_PP1_TP3_EP11`
-> `DP1 PP1 TP3`). With TP = PP = 1 the worker runs inside EngineCore, so EngineCore's per-rank
memory lines are `TP0`. A bare `(Worker pid=P)` is resolved through the `world_size=… rank=…`
line that worker printed.

The year is not in the log: timestamps come out as `YYYY-MM-DD HH:MM:SS` with the year taken from
the reference date (the file's modification time, or now) and moved on at a Dec → Jan rollover,
so that every layer that reads a timestamp reads vLLM's the same way as SGLang's.

Here: the dispatch (a line cut, unwrapped, dated, labelled and handed on), the failure signatures
that any line may carry, and whole files. What each kind of record says is read in records.py.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, BinaryIO

from cockpit.backends import pylogging, rejoin
from cockpit.backends.vllm import bulk, deaths, shortlines
from cockpit.backends.vllm.records import RecordReader, health_ok
from cockpit.backends.vllm.sniff import MESSAGES
from cockpit.core import events as ev
from cockpit.core.crashstory import is_oom_kill_line
from cockpit.core.events import Event
from cockpit.core.linesplit import ByteReader, Lines
from cockpit.core.reducer import apply, end_of_input
from cockpit.core.sanitize import clean_text
from cockpit.core.state import RunState

# longest text of one line the grammar reads (a longer line is read on its head and counted in
# `lines_cut`; `diagnose` says so): every pattern is linear, this bounds the cost of a hostile file
CLASSIFY_CAP = 16 * 1024
READ_CHUNK = 1 << 20
# A feed of at least this many bytes (a file read in 1 MiB chunks, not a live tail) takes the bulk
# path (bulk.py) once the server is ready
BULK_BYTES = 64 * 1024

_GROUP = r"\([^()]*? pid=\d+(?:, ip=[^)]*)?\) "
_RX_RECORD = re.compile(
    r"(?P<prefixes>(?:" + _GROUP + r"){0,8})(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<md>\d{2}-\d{2}) (?P<hms>\d{2}:\d{2}:\d{2}) \[?(?P<file>[^\]\s]{1,200}):(?P<lineno>\d+)\] ?(?P<msg>.*)$"
)
_RX_GROUP_ANYWHERE = re.compile(_GROUP)
_RX_GROUPS_ONLY = re.compile(r"^(?P<prefixes>(?:" + _GROUP + r")+)(?P<msg>.*)$")
_RX_TORCH_RANK = re.compile(r"^\[rank(\d+)\]:\s?")
_RX_ONE_GROUP = re.compile(r"\((?P<name>[^()]*?) pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)")
_RX_WORKER = re.compile(r"^(?:VllmWorkerProcess|RayWorkerVllm|VllmWorker|Worker)(?:[-_ ](?P<tags>.+))?$")
_RX_TAG = re.compile(r"(?P<kind>DP|PP|PCP|TP|DCP|EP)(?P<idx>\d+)|rank=(?P<rank>\d+)|^(?P<mp>\d+)$")
_RX_ENGINE = re.compile(r"^EngineCore(?:_(?:DP)?(?P<dp>\d+))?$")
# What operators' tooling puts in front of a line (learnt, never assumed).
_WRAPPERS = (
    re.compile(r"^\S+\s+\|\s?"),  # docker compose
    re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d) (?:stdout|stderr) [FP] "),  # Kubernetes CRI
    re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d) "),  # docker logs -t, kubectl --timestamps
    re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w.@-]+\[\d+\]: "),  # journald
    re.compile(r"^\d+: "),  # srun -l
    re.compile(r"^\[\d{4}-\d\d-\d\d[T ][^\]]*\] "),  # CI / launcher time stamps
    re.compile(r"^\[[\w.-]+\]: "),  # a launcher's `[vllm]: `
    re.compile(r"^\s+\|\s"),  # Buildkite's column
)
_CARET_ANSI = re.compile(r"\^\[\[[0-9;]*[A-Za-z]|\s?\[\d{1,2}(?:;\d{1,2})?m\s?")

_RX_EXC = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure)): ?(.*)$")
_SIZE = r"([\d.]+) ?([KMGT]i?B|B)"
_RX_OOM_REQ = re.compile(r"Tried to allocate " + _SIZE)
_RX_OOM_GPU = re.compile(r"GPU (\d+) has a total capacity")
_RX_OOM_TOTAL = re.compile(r"total capacity of " + _SIZE + r" of which " + _SIZE + r" is free")
_RX_DIED = re.compile(r"died(?: unexpectedly \(|, )exit code: (-?\d+)")  # `None`: no match, exit code unknown
# torch's device OOM in each device's words (CUDA; ROCm's HIP; Ascend's NPU; Intel's XPU; Moore
# Threads' MUSA) and the CUDA runtime's/driver's `CUDA error: out of memory`: one kind, the message names the device
_RX_DEVICE_OOM = re.compile(r"(?:CUDA|HIP|NPU|XPU|MUSA) out of memory|(?:CUDA|HIP) (?:driver )?error: out of memory")
# the executor's or client's word that a process it watched died (0.8+ `Worker proc X died unexpectedly,
# shutting down executor.`, `Engine core proc X died unexpectedly`, 0.20+ `Engine core process X died
# unexpectedly.`, `RayWorkerProc rank=N died unexpectedly`)
_RX_PROC_DIED = re.compile(r"^(?:Worker proc|Engine core proc(?:ess)?|RayWorkerProc rank=\d+)\b.* died unexpectedly")
_RX_RAY_DIED = re.compile(r"RayWorkerProc rank=(\d+) died")
_RX_V0_DIED = re.compile(r"Worker (\S+) pid (\d+) died, exit code: ")
_RX_WORKER_PROC = re.compile(r"Worker proc (\S+) died")
_UNITS_GIB = {"B": 1 / 2**30, "KiB": 1 / 2**20, "MiB": 1 / 2**10, "GiB": 1.0, "TiB": 1024.0,
              "KB": 1e3 / 2**30, "MB": 1e6 / 2**30, "GB": 1e9 / 2**30, "TB": 1e12 / 2**30}
# Exceptions that only wrap a root cause printed elsewhere: never the crash's message.
_WRAPPER_EXCEPTIONS = ("Engine core initialization failed", "WorkerProc initialization failed",
                       "EngineCore encountered an issue", "Frontend process failed")
# Messages only vLLM prints (a log whose heads were stripped by the reporter still reads as vLLM).
_VLLM_MESSAGES = MESSAGES  # `sniff` tests the same words before this module is imported
# Text only a start-up failure prints: a crash with nothing sharper is a start-up crash.
_STARTUP_MARKS = ("failed to start", "Timed out waiting for engine core", "initialization failed", "in init_device", "in load_model", "in load_weights",
                  "in initialize_model_parallel", "in init_worker_distributed_environment", "in _initialize_kv_caches",
                  "in determine_available_memory", "in profile_run", "in wait_for_ready", "in _init_executor",
                  "ncclCommInitRank", "'init_device'", "warming up sampler", "in _dummy_sampler_run",
                  "in compile_or_warm_up_model", "in _wait_for_engine_startup", "in wait_for_engine_startup",
                  "in launch_core_engines", "in make_async_mp_client", "in from_vllm_config",
                  "in build_async_engine_client", "_repack(", "in gptq_marlin_repack", "in process_weights_after_loading", "in init_distributed_environment",
                  "in _init_workers_ray", "in init_worker", "Loading safetensors checkpoint shards",
                  # the model being loaded: the engine is starting (a crash after it and before any
                  # serving evidence is a start-up crash; the corpus keeps every line between)
                  "Starting to load model ", "Loading weights took ", "Model loading took ", "Loading model weights took ")
# an exception whose own message says NCCL failed — its library, a communicator (PyNccl…, nccl_m2n), its
# unique id: `RuntimeError: failed to load the NCCL library for unique-id rendezvous`, `Failed to
# initialize PyNcclEplbCommunicator (…)`, `NCCL4Py unique-id generation failed: …` (0.20+)
# Two anchors searched in turn, not one `nccl.*fail` pattern: `.*` between two words is quadratic on a
# line that repeats the first word without the second (the hostile-lines test found one).
_RX_NCCL_WORD = re.compile(r"\bnccl\w*\b", re.IGNORECASE)
_RX_FAIL_WORD = re.compile(r"\bfail\w*\b", re.IGNORECASE)
_RX_FAIL_OR_ERROR = re.compile(r"\b(?:fail\w*|error)\b", re.IGNORECASE)
_RX_NCCL_AFTER = re.compile(r"\b(?:py)?nccl", re.IGNORECASE)


def _nccl_raised(msg: str) -> bool:
    """NCCL named and then a failure or an error named after it, or a failure and then NCCL."""
    m = _RX_NCCL_WORD.search(msg)
    if m is not None and _RX_FAIL_OR_ERROR.search(msg, m.end()) is not None:
        return True
    f = _RX_FAIL_WORD.search(msg)
    return f is not None and _RX_NCCL_AFTER.search(msg, f.end()) is not None


_NCCL_ERROR_MARKS = ("NCCL error", "ncclSystemError", "ncclInternalError", "ncclUnhandledCudaError",
                     "ncclInvalidUsage", "ncclRemoteError", "unhandled system error", "unhandled cuda error")


def _gib(num: str, unit: str) -> float | None:
    try:
        return round(float(num) * _UNITS_GIB.get(unit, 1.0), 4)
    except ValueError:
        return None


def _clean(raw: bytes) -> str:
    """One line's bytes -> text: CRLF, tqdm `\\r` redraws (the last segment), ANSI, bad UTF-8."""
    if b"\r" in raw:
        raw = raw.rstrip(b"\r")
        cut = raw.rfind(b"\r")
        if cut != -1:
            raw = raw[cut + 1 :]
    text = raw[:CLASSIFY_CAP].decode("utf-8", "replace")
    if not text.isprintable():  # most lines are; the rest lose every escape and control character
        text = clean_text(text, keep_newlines=False)
    if "[" in text and ("^[[" in text or "m " in text):
        # colour codes pasted without their ESC byte (`^[[0;36m`, ` [36m`)
        text = _CARET_ANSI.sub(lambda m: " " if m.group(0).startswith(" ") and m.group(0).endswith(" ") else "", text)
    return text


def rank_label_for(name: str, dp_size: int | None = None) -> tuple[str | None, str]:
    """A process group's name -> (rank label or None, role: "worker" | "engine" | "api" | "other")."""
    m = _RX_WORKER.match(name)
    if m:
        tags = m["tags"] or ""
        found: dict[str, int] = {}
        for t in _RX_TAG.finditer(tags):
            if t["kind"]:
                found[t["kind"]] = int(t["idx"])
            elif t["rank"] is not None:
                found["TP"] = int(t["rank"])
            elif t["mp"] is not None:
                found["TP"] = int(t["mp"])
        if not found:
            return None, "worker"
        parts = [f"{k}{found[k]}" for k in ("DP", "PP") if k in found]
        parts.append(f"TP{found.get('TP', 0)}")
        return " ".join(parts), "worker"
    m = _RX_ENGINE.match(name)
    if m:
        dp = int(m["dp"]) if m["dp"] is not None else 0
        if dp > 0 or (dp_size or 1) > 1:
            return f"DP{dp} TP0", "engine"
        return "TP0", "engine"
    if name.startswith(("APIServer", "ApiServer", "MainProcess", "DPSupervisor")):
        return None, "api"
    return None, "other"


class VLLMLogParser(RecordReader):
    """Hand it whole, numbered lines (`Lines`, from the one splitter); it returns their events. It
    holds no partial line: an over-long one reaches it as its head or last `\r` segment."""

    def __init__(self, *, reference_time: float | None = None) -> None:
        super().__init__()
        self._lines = 0
        self._nothing: dict[bytes, int] = {}  # short lines read as nothing, at which epoch (shortlines.py)
        self._epoch = 0  # lines classified so far (not counted only)
        ref = time.gmtime(reference_time if reference_time is not None else time.time())
        self._ref_year, self._ref_month = ref.tm_year, ref.tm_mon
        self._year: int | None = None
        self._last_month: int | None = None
        self._wrappers: list[re.Pattern[str]] = []
        self._workers_seen = False
        self.recognised = 0  # lines read as vLLM's: records, process groups, or lines with events
        self.lines_cut = 0  # lines longer than CLASSIFY_CAP, classified on their head
        self._last_was_vllm = False
        self._serving_told = False
        self._startup_told = False
        self._held: rejoin.Held = None  # a line that may be the first piece of a re-wrapped one (rejoin.py)


    @property
    def lines_seen(self) -> int:
        return self._lines

    def skip_lines(self, n: int) -> None:
        self._lines += n

    def feed(self, lines: Lines) -> list[Event]:
        """The events of whole, numbered lines (the splitter's: cockpit/core/linesplit.py)."""
        out: list[Event] = []
        if lines.first - 1 > self._lines:  # lines went by unread (the splitter's count is the file's)
            self._lines = lines.first - 1
        if len(lines.lead) + lines.end - lines.start < BULK_BYTES:  # a live tail's feed: every line classified
            self._each(lines.raw_lines(), out)
            return out
        buf = lines.whole()
        end = len(buf)
        # a file's chunk: line by line until the server is ready (a file's first chunk), then the
        # rest in bulk (bulk.py)
        pos = 0 if self._ready else shortlines.until_ready(self, buf, end, out, _clean, CLASSIFY_CAP)
        if pos < end:
            bulk.scan(buf, pos, end, CLASSIFY_CAP, self._each, self._access_lines, out, _clean)
        return out

    def _each(self, lines: list[bytes], out: list[Event]) -> None:
        shortlines.each(self, lines, out, _clean, CLASSIFY_CAP)  # a repeated short line read as nothing: counted

    def _access_lines(self, n: int) -> bool:
        """n uvicorn access lines went by (bulk.py proved them): what `classify` does with each once
        the server is ready. False while a learnt wrapper must come off them first."""
        if self._wrappers or not self._ready:
            return False
        self._lines += n
        self.recognised += n
        self._last_was_vllm = True
        return True

    def _count_cut(self, raw: bytes) -> None:
        raw = raw.rstrip(b"\r")
        if len(raw) - (raw.rfind(b"\r") + 1) > CLASSIFY_CAP:
            self.lines_cut += 1

    def finish(self) -> list[Event]:
        out: list[Event] = []
        out.extend(rejoin.flush(self._held))  # a re-wrapped exception's text that ran to the end
        self._held = None
        self._flush_tokens(out, self._lines, None, before_capture=not self._crashed)
        if self._fmt_sent is None and (self._crashed or self._kv_tokens is not None or self._ready):
            self._send_fmt(self._lines, None, out)  # vLLM's messages without any of its heads
        return out

    # ---- one line ---------------------------------------------------------------------------

    def _unwrap(self, text: str) -> str:
        for _ in range(3):
            for rx in self._wrappers:
                m = rx.match(text)
                if m:
                    text = text[m.end() :]
                    break
            else:
                return text
        return text

    def _learn_wrapper(self, head: str) -> None:
        rest = head
        for _ in range(3):
            for rx in _WRAPPERS:
                m = rx.match(rest)
                if m:
                    if rx not in self._wrappers:
                        self._wrappers.append(rx)
                    rest = rest[m.end() :]
                    break
            else:
                return

    def _learn_from_group_line(self, text: str) -> str | None:
        """A wrapper in front of a process group on a line without a level (≤0.30 bare text)."""
        gm = _RX_GROUP_ANYWHERE.search(text)
        if gm is None or gm.start() == 0:
            return None
        before = len(self._wrappers)
        self._learn_wrapper(text[: gm.start()])
        if len(self._wrappers) == before:
            return None
        return self._unwrap(text)

    def _ts(self, md: str, hms: str) -> str:
        month = int(md[:2])
        if self._year is None:
            self._year = self._ref_year - 1 if month > self._ref_month else self._ref_year
        elif self._last_month == 12 and month == 1:
            self._year += 1
        self._last_month = month
        return f"{self._year}-{md} {hms}"

    def _label(self, prefixes: str) -> tuple[str | None, str]:
        """The innermost worker group names the rank; else the innermost engine/api group."""
        best: tuple[str | None, str] = (None, "other")
        for g in _RX_ONE_GROUP.finditer(prefixes):
            name, pid = g["name"].strip(), g["pid"]
            label, role = rank_label_for(name, self._dp_size)
            if role == "worker":
                if label is not None:
                    self._pid_label[pid] = label
                    if self._era is None or self._era < "0.11+":
                        self._era = "0.11+" if name.startswith("Worker_") else "0.10"
                else:
                    label = self._pid_label.get(pid)
                    if label is None and name == "VllmWorkerProcess":
                        # V0's worker tells its rank only at DEBUG (`world_size=… rank=…`): without that
                        # line, its group as printed is the one name the log gives it
                        label = f"{name} pid={pid}"
                best = (label, "worker")
            elif best[1] != "worker":
                best = (label, role)
        return best

    def classify(self, line: int, text: str, out: list[Event]) -> None:
        before = len(out)
        self._classify(line, text, out)
        if len(out) > before or self._last_was_vllm:
            self.recognised += 1
        if self._held is not None or (len(text) >= rejoin.MIN_WIDTH and (len(out) == before or type(out[-1]) in _WAITS)):
            self._rejoin(line, text, out, before)

    def _rejoin(self, line: int, text: str, out: list[Event], before: int) -> None:
        """A line after one that may have been cut by a terminal's wrap: the two joined and read
        again as the first one's line (rejoin.py). The pieces after the first carry no record
        head: only a learnt wrapper comes off them."""
        piece = self._unwrap(text) if self._wrappers else text
        told, self._held = rejoin.step(line, piece, out[before:], self._held, self._read_joined)
        out[before:] = told

    def _read_joined(self, line: int, text: str) -> list[Event]:
        joined: list[Event] = []
        self._classify(line, text, joined)
        return joined

    def _classify(self, line: int, text: str, out: list[Event]) -> None:
        self._last_was_vllm = False
        if self._wrappers:
            text = self._unwrap(text)
        if text[:1] == "{" and '"message"' in text and self._json_record(line, text, out):
            return
        if " HTTP/1." in text and "INFO:  " in text[:80]:
            # uvicorn's access lines are most of a busy log: one look for a /health 200, nothing more
            self._last_was_vllm = True
            if not self._ready and health_ok(text):
                self._serving_evidence(line, None, out)
            return
        m = _RX_RECORD.search(text)
        if m is not None and m.start() > 0:
            head = text[: m.start()]
            if _RX_GROUPS_ONLY.match(head + " ") is None:
                self._learn_wrapper(head)
        ts: str | None = None
        rank: str | None = None
        role = "other"
        if m is not None:
            self._last_was_vllm = True
            ts = self._ts(m["md"], m["hms"])
            rank, role = self._label(m["prefixes"])
            msg = m["msg"]
            if role == "worker":
                self._workers_seen = True
            pid_m = _RX_ONE_GROUP.search(m["prefixes"] or "")
            if m["file"] == "model_runner.py" and m["msg"].startswith(("Using V2", "Graph capturing finished")):
                self._v2 = True
            self._last_ts = ts
            if not self._cpu_record(line, ts, rank, role, m["file"], msg, out):
                self._record(line, ts, rank, role, msg, pid_m["pid"] if pid_m else None, out)
            if self.fmt != self._fmt_sent:  # the first record proves the format; an era may sharpen it
                self._send_fmt(line, ts, out)
        else:
            peeled = pylogging.peel("vllm", text) if "vllm." in text else None
            if peeled is not None:  # vLLM's logger under a format of its operator's (pylogging.py)
                self._classify(line, peeled, out)
                self._last_was_vllm = True
                return
            g = _RX_GROUPS_ONLY.match(text)
            if g is None and "pid=" in text:
                unwrapped = self._learn_from_group_line(text)
                if unwrapped is not None:
                    text = unwrapped
                    g = _RX_GROUPS_ONLY.match(text)
            if g is not None:
                self._last_was_vllm = True
                rank, role = self._label(g["prefixes"])
                msg = g["msg"]
            else:
                msg = text
                r = _RX_TORCH_RANK.match(text)
                if r is not None:  # torch.distributed's `[rank2]:` (NCCL watchdog, tracebacks of ranks)
                    rank, role, msg = f"TP{r[1]}", "worker", text[r.end():]
            self._bare(line, rank, role, msg, out)
            if self._fmt_sent is None and (g is not None or "vllm" in text.lower()):
                self._send_fmt(line, None, out)  # a vLLM process group, or vLLM's own code in a traceback
        if role == "engine" and self._workers_seen:
            rank = None  # with worker processes, EngineCore is no rank: it reports theirs
        self._anywhere(line, ts, rank, msg, out)

    def _json_record(self, line: int, text: str, out: list[Event]) -> bool:
        """0.32+ `--logging-config.formatter json`: one object per record, `processName` the
        multiprocessing name (`VllmWorker-3`, `EngineCore`, `MainProcess`)."""
        try:
            obj = json.loads(text)
        except ValueError:
            return False
        if not isinstance(obj, dict) or not isinstance(obj.get("message"), str):
            return False
        self._last_was_vllm = True
        asctime = str(obj.get("asctime") or "")
        ts = asctime[:19] if len(asctime) >= 19 and asctime[4:5] == "-" else None
        rank, role = rank_label_for(str(obj.get("processName") or ""), self._dp_size)
        if role == "worker":
            self._workers_seen = True
        first, *rest = obj["message"].split("\n")
        self._record(line, ts or "", rank, role, first, str(obj.get("process") or "") or None, out)
        if self.fmt != self._fmt_sent:
            self._send_fmt(line, ts, out)
        self._anywhere(line, ts, rank if role != "engine" or not self._workers_seen else None, first, out)
        for part in rest:  # a traceback inside the message
            self._bare(line, rank, role, part, out, ts=ts)
            self._anywhere(line, ts, rank, part, out)
        return True

    # ---- failure signatures (any line may carry one) ---------------------------------------------

    def _anywhere(self, line: int, ts: str | None, rank: str | None, msg: str, out: list[Event]) -> None:
        if out and out[-1].line == line and not isinstance(out[-1], (ev.TracebackFrame, ev.FormatSeen)):
            return  # the record grammar already explained this line
        specific: list[Event] = []
        if is_oom_kill_line(msg):  # the kernel's or Slurm's own OOM words: the evidence a SIGKILL needs
            specific.append(ev.OomKillLine(line, ts, rank, msg.strip()))
        elif "WorkerProc hit an exception" in msg or "WorkerProc failed" in msg:
            specific.append(ev.SchedulerException(line, ts, rank, msg.strip()))
        elif "EngineCore failed to start" in msg:
            # a crash whose cause is the exception around it (startup_error unless memory/NCCL/port)
            specific.append(ev.SchedulerException(line, ts, None, msg.strip()))
        elif ("EngineCore encountered a fatal error" in msg or "AsyncLLM output_handler failed" in msg
              or "EngineDeadError" in msg):
            if "EngineCore encountered a fatal error" in msg:
                specific.append(ev.SchedulerException(line, ts, None, msg.strip()))
            if not self._serving_told:  # only a serving engine fails this way
                self._serving_told = True
                specific.append(ev.PhaseEvidence(line, ts, None, "serving"))
        elif "out of memory" in msg and _RX_DEVICE_OOM.search(msg) is not None:
            specific.append(_cuda_oom(line, ts, rank, msg))
        elif "Out of memory! No free blocks are available." in msg:  # V0's block manager (≤0.6): the KV blocks ran out
            specific.append(ev.KvPoolExhausted(line, ts, rank, None, msg, None))
        elif ("No available memory for the cache blocks" in msg or "KV cache is needed, which is larger than" in msg
              or "insufficient memory to allocate kv cache" in msg or "exceeds available Mamba cache blocks" in msg
              or "larger than the maximum number of tokens that can be stored in KV cache" in msg
              or "is less than desired GPU memory utilization" in msg or "Cannot auto-fit max_model_len" in msg
              # the CPU build (vllm/v1/worker/cpu_worker.py): host memory below util × total, or below
              # the KV bytes asked for (VLLM_CPU_KVCACHE_SPACE / --kv-cache-memory-bytes)
              or "is less than desired CPU memory utilization" in msg
              or "allocation is less than requested memory for kv" in msg):
            specific.append(ev.NotEnoughMemory(line, ts, rank, None, None, None, msg))
        elif "collective operation timeout" in msg or ("NCCL" in msg and "timed out" in msg.lower()):
            specific.append(ev.NcclTimeout(line, ts, rank, msg))
        elif any(mark in msg for mark in _NCCL_ERROR_MARKS) or (
                ("CCL" in msg or "ccl" in msg) and _RX_EXC.match(msg.strip()) is not None and _nccl_raised(msg)):
            specific.append(ev.NcclError(line, ts, rank, msg))
        elif "ddress already in use" in msg or "[Errno 98]" in msg or "Could not find open port after" in msg:
            specific.append(ev.PortInUse(line, ts, rank, msg))
        elif "died unexpectedly (exit code:" in msg or (" died, exit code: " in msg and msg.startswith("Worker ")) \
                or (" died unexpectedly" in msg and _RX_PROC_DIED.search(msg) is not None):
            m = _RX_DIED.search(msg)  # `exit code: None`: the process ended without an exit status told
            w = _RX_WORKER_PROC.search(msg)  # the executor names the worker (`VllmWorker-0`: multiprocessing's name)
            v0 = _RX_V0_DIED.match(msg)  # V0: `Worker VllmWorkerProcess pid 4242 died, exit code: -9`
            if v0 is not None:
                dead = self._pid_label.get(v0[2]) or (f"{v0[1]} pid={v0[2]}" if v0[1] == "VllmWorkerProcess" else rank)
            else:
                ray = _RX_RAY_DIED.search(msg)  # 0.20+: `RayWorkerProc rank=3 died unexpectedly`
                named = f"TP{ray[1]}" if ray is not None else rank_label_for(w[1])[0] if w is not None else None
                dead = named or rank  # the named worker, not the writer
            specific.append(ev.RankDead(line, ts, dead, None, int(m[1]) if m else None, "crashed", msg))
        elif "engine core exited unexpectedly" in msg:
            # the API server's monitor saw VLLM::EngineCore die without a word of its own (SIGKILL, a
            # native crash): the API server then exits 0 and /health says 503 until it does
            specific.append(ev.RankDead(line, ts, rank, None, None, "crashed", msg))
        elif ("Engine core initialization failed" in msg or "Timed out waiting for engine core processes" in msg
              or "Frontend process failed during engine core initialization" in msg):
            # the API server's side: the cause, if any, is in the engine's lines (or not in the log)
            specific.append(ev.SchedulerException(line, ts, None, msg.strip()))
        elif ts is None and msg.strip() == "Killed":  # the shell's: some SIGKILL, from whom it does not say
            specific.append(ev.Killed(line, ts, rank, msg.strip()))
        else:  # engine deaths of every generation, the iteration timeout, a peer that closed (deaths.py)
            specific = deaths.classify(line, ts, rank, msg)
        method = deaths.method_frame(line, ts, rank, msg)
        if method is not None:
            out.append(method)
        if specific:
            if not all(isinstance(e, ev.PhaseEvidence) for e in specific):
                self._crashed = True
            out.extend(specific)
            if isinstance(specific[-1], (ev.CudaOom, ev.NotEnoughMemory, ev.RankDead, ev.Killed, ev.OomKillLine)):
                self._flush_tokens(out, line, ts, before_capture=False)
        if not self._startup_told and not self._ready and any(mark in msg for mark in _STARTUP_MARKS):
            self._startup_told = True
            out.append(ev.PhaseEvidence(line, ts, None, "startup"))
        m = _RX_EXC.match(msg.strip())
        if m and not any(w in m[2] for w in _WRAPPER_EXCEPTIONS):
            if line - self._module_frame_line <= 2 and not self._ready:
                # raised by module-level code (an import): start-up, unless sharper evidence says otherwise
                out.append(ev.PhaseEvidence(line, ts, rank, "startup"))
            out.append(ev.ExceptionLine(line, ts, rank, m[1], m[2]))


_WAITS = (ev.ExceptionLine, ev.PhaseEvidence, ev.FormatSeen, ev.EngineAdvice)  # what a line that may be a first piece can say (rejoin.py)


def _cuda_oom(line: int, ts: str | None, rank: str | None, text: str) -> ev.CudaOom:
    req = _RX_OOM_REQ.search(text)
    gpu = _RX_OOM_GPU.search(text)
    tot = _RX_OOM_TOTAL.search(text)
    return ev.CudaOom(
        line, ts, rank,
        _gib(req[1], req[2]) if req else None,
        int(gpu[1]) if gpu else None,
        _gib(tot[1], tot[2]) if tot else None,
        _gib(tot[3], tot[4]) if tot else None,
        text,
    )


# ---- whole files ------------------------------------------------------------------------------


def log_score(sample: bytes) -> float:
    """How much a log's opening looks like vLLM's: the share of its lines that are vLLM records or
    carry a vLLM process group (0..1)."""
    text = sample.decode("utf-8", "replace")
    lines = [ln for ln in text.splitlines()[:2000] if ln.strip()]
    if not lines:
        return 0.0
    hits = 0.0
    for ln in lines:
        ln = ln if ln.isprintable() else clean_text(ln, keep_newlines=False)
        g = _RX_ONE_GROUP.search(ln)
        if (g is not None and rank_label_for(g["name"].strip())[1] != "other") or "vllm" in ln.lower() or any(
                mark in ln for mark in _VLLM_MESSAGES):
            hits += 1
        elif (m := _RX_RECORD.search(ln)) is not None:
            # vLLM's head; without its `[` (before 0.8) it is also what SGLang 0.1 printed through
            # vLLM's loader, so it weighs less than vLLM's own words
            hits += 1 if "[" in ln[m.start("file") - 1 : m.start("file")] else 0.3
    return hits / len(lines)


def read_log(source: str | Path | BinaryIO, state: RunState | None = None,
             stats: dict[str, int] | None = None) -> RunState:
    """Parse a whole log (a path or an open binary stream) into a RunState; `stats` (the caller's)
    gets this input's `lines`, `recognised` (lines read as vLLM's) and `foreign` (0) counts."""
    import os


    st = state if state is not None else RunState(backend="vllm", memory_flag="gpu_memory_utilization")
    st.backend = "vllm"

    def consume(f: BinaryIO, parser: VLLMLogParser) -> None:
        reader = ByteReader(parser)
        while True:
            chunk = f.read(READ_CHUNK)
            if not chunk:
                break
            for e in reader.feed(chunk):
                apply(st, e)
        for e in reader.finish():
            apply(st, e)
        end_of_input(st)
        st.lines_seen = max(st.lines_seen, parser.lines_seen)
        st.lines_recognised += parser.recognised
        if stats is not None:
            stats.update(lines=parser.lines_seen, recognised=parser.recognised, foreign=0, cut=parser.lines_cut)

    if isinstance(source, (str, Path)):
        with open(source, "rb") as f:
            consume(f, VLLMLogParser(reference_time=os.fstat(f.fileno()).st_mtime))
    else:
        consume(source, VLLMLogParser())
    return st


def events_of(text: str) -> list[Any]:
    """Every event of a log given as text (tests, the simulator's self-checks)."""
    p = ByteReader(VLLMLogParser())
    return [*p.feed(text.encode()), *p.finish()]
