"""The crash story and the reducer's shared context: how a crash is told from several lines.

A header that names the failing process (e.g. `[… TP3] Scheduler hit an exception:`) names the
rank, the traceback frames name the phase (the backend reads each frame's phase from the engine's
function names and puts it on the event), and the exception line names the kind. SIGQUIT, `Killed`
and dead-rank lines that follow only add to the decisive lines, except that they are the whole
story when nothing else was printed (the host OOM killer leaves no traceback). A bare traceback is
a pending crash, committed at the end of input, a process exit or a crash line.

Kept apart from `reducer.py` (the per-event handlers) so that each reads on its own; pure, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cockpit.core import events as ev
from cockpit.core.numbers import plural
from cockpit.core.state import HOST_CACHE_SHORT, KILLED_BY_SIGNAL, Crash, RunState

_PHASE_ORDER = {"unknown": 0, "loading": 1, "kv_pool": 2, "capturing": 3, "warmup": 4, "ready": 5, "hung": 5}
MAX_DECISIVE_LINES = 8
_MAX_FRAMES = 64
# Exit codes of a deliberate stop (SIGTERM / SIGINT, as a status or as 128 + signal).
_STOP_EXITS = {0, -15, 143, -2, 130}
_OOM_KILL_EXITS = {-9, 137}
# Crash kinds a later, more specific line may replace.
_VAGUE_KINDS = {"unknown"}


@dataclass
class _Context:
    """What the reducer remembers between events (not part of the published state)."""

    exc_rank: str | None = None  # the rank of the last crash header
    exc_seen: bool = False
    frame_line: int = -100  # line of the last traceback frame (an exception line right after ends it)
    # A crash that rests on a bare traceback alone: it becomes the crash when the input ends or the
    # process exits (`end_of_input`, ProcessExited), and is dropped if the server serves on.
    pending: Crash | None = None
    phase_before: str = "unknown"  # the run's phase when the crash happened (its lifecycle)
    phase_since_before: str | None = None
    max_seq: int = 0  # the highest collective sequence number seen
    phase_evidence: str | None = None  # what a line proved the server was doing (PhaseEvidence)
    requests: int = 0  # request log lines (POST access lines: health, metrics and info are GETs)
    batches: int = 0  # prefill/decode batch lines
    batch_rank: str | None = None  # the rank of the last batch line (DP groups batch apart)
    # (phase the backend read from the frame, "file:function") since that exception
    frames: list[tuple[str | None, str]] = field(default_factory=list)
    # the crash rests on a process's death told by its watcher (`Worker proc … died unexpectedly`):
    # the tracebacks after it (`RuntimeError: cancelled`, `Executor failed`) are its consequences
    death_said: bool = False
    # the first kernel/Slurm OOM line seen: the evidence that makes a SIGKILL an OOM kill
    oom_line: str | None = None


def _ctx(state: RunState) -> _Context:
    c = state.reducer_memory
    if not isinstance(c, _Context):
        c = state.reducer_memory = _Context()
    return c


def _advance(state: RunState, phase: str, ts: str | None) -> None:
    if state.phase in ("crashed", "stopped"):
        return
    if _PHASE_ORDER.get(phase, 0) > _PHASE_ORDER.get(state.phase, 0):
        state.phase = phase
        state.phase_since = ts


def _hint_format(state: RunState, fmt: str, strong: bool = False) -> None:
    if strong or state.format is None:
        state.format = fmt


def _rank_label(e: ev.Event) -> str:
    # A scheduler without a prefix is the single-GPU case: rank 0.
    return e.rank or "TP0"


def _reset(state: RunState) -> None:
    fresh = RunState(backend=state.backend, memory_flag=state.memory_flag)
    lines = state.lines_seen
    # a dataclass without slots: take every field of a fresh state (reducer memory included)
    state.__dict__.update(fresh.__dict__)
    state.lines_seen = lines


def _where(e: ev.Event) -> str:
    if e.ts is None:
        return ""
    inner = " ".join(x for x in (e.ts, e.rank) if x)
    return f"[{inner}] " if inner else ""


def _describe(e: ev.Event, brief: bool = False) -> str:
    """The event as a decisive line. `brief`: the crash is already told by lines above it (a
    traceback, an OOM): a signal is only named, not explained — its one explanation is the crash
    dialog's exit sentence, and "no Python error before it" under a shown traceback would contradict it."""
    text = getattr(e, "text", None)
    if isinstance(e, ev.ExceptionLine):
        text = f"{e.exc_type}: {e.text}"
    elif isinstance(e, ev.SchedulerException):
        text = e.text
    elif isinstance(e, ev.TracebackFrame):
        text = _frame_words(f"{e.file or ''}:{e.function}")
    elif isinstance(e, ev.ExitCode):
        text = f"Exit code: {e.exit_code}" + _signal_suffix(e.exit_code, brief)
    elif isinstance(e, ev.ProcessExited):
        text = f"server process exited with code {e.exit_code}" + _signal_suffix(e.exit_code, brief)
    elif isinstance(e, ev.TracebackStart):
        text = "Traceback (most recent call last):"  # the line itself, never the event's name
    elif text is None:
        text = type(e).__name__
    return _where(e) + str(text)


def _frame_words(frame: str) -> str:
    """`file:function` as a decisive line: Python's own `File "…", in function`, or, for a call read
    from the source line a traceback quotes (no file of its own), the call named as such."""
    file, _, func = frame.rpartition(":")
    if not file:
        return f"in {func}() (a call quoted in the traceback's source lines)"
    return f'File "{file}", in {func}'


# What a signal that ended the server means to an operator (exit code 128+N as a shell or Cockpit's
# waiter reports it, or -N as Python's subprocess does).
SIGNAL_WORDS = {
    4: ("SIGILL", "illegal instruction: the engine's binary (or a kernel it loaded) uses instructions this CPU/GPU "
                  "lacks — a build for another CPU (AVX-512 on an AVX2 host) or GPU architecture"),
    6: ("SIGABRT", "aborted: a C++ assertion or std::terminate in the engine's native code"),
    7: ("SIGBUS", "bus error: memory-mapped file or shared memory gone (a model file truncated or replaced under "
                  "the server, /dev/shm too small in a container)"),
    9: ("SIGKILL", "killed from outside; who sent it is not known: an operator (`kill -9`), a job scheduler "
                   "(Slurm at its time limit), a supervisor, or the kernel's OOM killer (`dmesg -T | grep -i oom` "
                   "/ `journalctl -k` on the host shows an OOM kill)"),
    11: ("SIGSEGV", "segmentation fault in native code (a driver, kernel or library version mismatch)"),
    15: ("SIGTERM", "terminated by a signal from outside"),
}


def signal_of(exit_code: int | None) -> int | None:
    """The signal number behind an exit code (-N, or 128+N), else None."""
    if exit_code is None:
        return None
    if exit_code < 0:
        return -exit_code
    if 128 < exit_code < 160:
        return exit_code - 128
    return None


def signal_words(exit_code: int | None) -> str | None:
    """`SIGILL (illegal instruction: …)` for an exit code that is a signal, else None."""
    sig = signal_of(exit_code)
    if sig is None:
        return None
    name, words = SIGNAL_WORDS.get(sig, (f"signal {sig}", "ended by a signal"))
    return f"{name}: {words}"


def _signal_suffix(exit_code: int | None, brief: bool = False) -> str:
    if brief:
        sig = signal_of(exit_code)
        return "" if sig is None else f" ({SIGNAL_WORDS[sig][0] if sig in SIGNAL_WORDS else f'signal {sig}'})"
    words = signal_words(exit_code)
    return f" ({words})" if words else ""


def _add_decisive(crash: Crash, line: str) -> None:
    if len(crash.decisive_lines) < MAX_DECISIVE_LINES and line not in crash.decisive_lines:
        crash.decisive_lines.append(line)


# When several frames name a phase, the most telling wins: graph capture beats cache init beats
# prefill/decode (a capture runs the model's forward too).
# "serving": a batch-loop frame (the least telling: any sharper frame wins)
_FRAME_PRECEDENCE = ("graph_capture", "startup", "prefill", "decode", "serving")


def _deciding_frame(frames: list[tuple[str | None, str]]) -> tuple[str, str] | None:
    """(phase, "file:function") of the most telling traceback frame (the backend named each
    frame's phase when it parsed the line)."""
    best: tuple[int, str, str] | None = None
    for phase, fr in frames:
        if phase in _FRAME_PRECEDENCE:
            rank = _FRAME_PRECEDENCE.index(phase)
            # a real `File "…"` frame beats a call read from the quoted source line above it
            if best is None or rank < best[0] or (rank == best[0] and not best[2].rpartition(":")[0]
                                                  and fr.rpartition(":")[0]):
                best = (rank, phase, fr)
    return (best[1], best[2]) if best else None


def _phase_from_frames(frames: list[tuple[str | None, str]]) -> str | None:
    found = _deciding_frame(frames)
    return found[0] if found else None


# A collective sequence number this high proves hours of serving: startup (weights, capture,
# warmup) issues a few thousand collectives per group, not a hundred thousand.
SERVING_SEQ = 100_000
# Crash kinds that can only happen before the server serves.
_STARTUP_KINDS = ("init_not_enough_memory", "port_in_use", "warmup_failed", "startup_error")
_LIFECYCLE = ("loading", "kv_pool", "capturing", "warmup")


def _crash_phase(state: RunState, kind: str, event: ev.Event) -> tuple[str, str]:
    """(phase, the evidence for it): from the crash's own words, traceback frames, the lifecycle
    lines, the last batch line, request logs and collective sequence numbers, in that order. When
    nothing proves a phase it is `unknown`, and the reason says what was missing."""
    c = _ctx(state)
    if kind == "graph_capture_oom":
        return "graph_capture", "out of memory while capturing CUDA graphs"
    if isinstance(event, ev.KvPoolExhausted) and event.stage in ("prefill", "decode"):
        return event.stage, f"the server's message names the {event.stage} batch"
    found = _deciding_frame(c.frames) if c.exc_seen or c.frames else None
    life = c.phase_before if state.phase == "crashed" else state.phase  # where the run was when it died
    before_ready = not state.ready_in_log and life in _LIFECYCLE
    if found is not None:
        if found[0] == "serving" and before_ready:
            # the batch loop also runs the warm-up request, before the server says ready
            return "startup", f"traceback frame {found[1].rpartition(':')[2]} (the batch loop) while the log was at {life}"
        if found[0] == "serving" and _batch_kind_of_crash(state) is not None:
            pass  # the batch loop alone: the crashing rank's last batch line says more (below)
        else:
            return found[0], f"traceback frame {found[1].rpartition(':')[2]}"
    if kind in _STARTUP_KINDS:
        return "startup", f"{kind} only happens before the server is ready"
    if isinstance(event, ev.RankDead) and event.how in ("dead", "died_during_init"):
        return "startup", "a rank died while the server waited for its ranks to start"
    if kind == HOST_CACHE_SHORT and not state.ready_in_log:
        return "startup", "the host cache sizes its host pool at startup"
    if life == "capturing" and not state.ready_in_log:
        return "graph_capture", "the last lifecycle line was a graph capture that never ended"
    if state.ready_in_log or c.batches:
        kind_before = _batch_kind_of_crash(state)
        if kind_before is not None:
            return kind_before, f"the last batch line before it was a {kind_before} batch"
        return "serving", "after the server said ready"
    if c.phase_evidence == "serving":
        return "serving", "a failure path that only a serving server takes"
    if before_ready:
        return "startup", f"the log was at {life} and the server never said ready"
    if c.max_seq >= SERVING_SEQ:
        return "serving", f"collective sequence number {c.max_seq:,}: the server had been serving"
    if c.requests:
        return "serving", f"{plural(c.requests, 'request log line')} before it"
    if c.phase_evidence == "startup":
        return "startup", "a line that only start-up prints"
    return "unknown", "no lifecycle, batch, request or traceback line before it names the phase"


def _dp_token(rank: str | None) -> str | None:
    return next((t for t in rank.split() if t.startswith("DP")), None) if rank else None


def _batch_kind_of_crash(state: RunState) -> str | None:
    """The last batch line's kind (prefill / decode) when it can be the crashing rank's batch: with
    DP attention each DP group runs batches of its own, so another group's batch line says nothing."""
    kind = state.last_batch_kind
    if kind not in ("prefill", "decode"):
        return None
    c = _ctx(state)
    mine, theirs = _dp_token(c.exc_rank), _dp_token(c.batch_rank)
    return None if mine is not None and theirs is not None and mine != theirs else kind


def _crash_rank(state: RunState, event: ev.Event) -> str | None:
    c = _ctx(state)
    if c.exc_seen:
        if c.exc_rank is not None:
            return c.exc_rank
        if len(state.ranks) == 1:  # single GPU: the scheduler prints no prefix
            return next(iter(state.ranks))
    if isinstance(event, ev.RankDead) and event.rank_index is not None:
        return _label_for_index(state, event.rank_index)
    return event.rank


def _label_for_index(state: RunState, index: int) -> str:
    token = f"TP{index}"
    for label in state.ranks:
        if token in label.split():
            return label
    return token


def _crash(state: RunState, event: ev.Event, kind: str, message: str | None = None, provisional: bool = False) -> None:
    """Record (or sharpen) the crash. The first specific kind wins; later lines only add context.
    `provisional`: the only evidence is a bare traceback; it waits as `pending` (see _Context)."""
    text = message if message is not None else _describe(event)
    c = _ctx(state)
    if provisional:
        if state.crash is None and c.pending is None:
            phase, reason = _crash_phase(state, kind, event)
            c.pending = Crash(kind=kind, phase=phase, rank=_crash_rank(state, event), line=event.line,
                              message=text, phase_reason=reason)
            _add_decisive(c.pending, _describe(event))
        return
    if state.crash is None and c.pending is not None:
        _commit_pending(state)  # the traceback before this line belongs to the same story
    crash = state.crash
    if crash is not None:
        if kind not in _VAGUE_KINDS:
            _exit_only_yields(crash)
        upgrade = crash.kind in _VAGUE_KINDS and kind not in _VAGUE_KINDS
        upgrade = upgrade or (crash.kind == "cuda_oom" and kind == "graph_capture_oom")
        upgrade = upgrade or (crash.kind == "host_oom_killed" and kind == HOST_CACHE_SHORT)
        # a SIGKILL nothing explained, then the evidence of an OOM kill (a kernel line after it)
        upgrade = upgrade or (crash.kind == KILLED_BY_SIGNAL and kind in ("host_oom_killed", HOST_CACHE_SHORT))
        # `terminate … DistBackendError`, then its what(): "Watchdog caught collective operation timeout"
        upgrade = upgrade or (crash.kind == "nccl_error" and kind == "nccl_timeout")
        if upgrade:
            crash.kind = kind
            crash.line = event.line
            crash.message = text
            crash.phase, crash.phase_reason = _crash_phase(state, kind, event)
            if crash.rank is None:
                crash.rank = _crash_rank(state, event)
        _add_decisive(crash, _describe(event, brief=not upgrade))
        _add_frame(state)
        return
    phase, reason = _crash_phase(state, kind, event)
    state.crash = Crash(kind=kind, phase=phase, rank=_crash_rank(state, event), line=event.line, message=text,
                        phase_reason=reason)
    _add_decisive(state.crash, _describe(event))
    _add_frame(state)
    _enter_crashed(state, event.ts)


def _exit_only_yields(crash: Crash | None) -> None:
    """A SIGKILL told only by the process's exit (line 0: the supervisor saw the pid die before it
    read the last lines) yields to what the log then says: after an error of its own, the 137 was
    the server's cleanup (it SIGKILLs its process group), not a kill from outside."""
    if crash is not None and crash.kind == KILLED_BY_SIGNAL and crash.line == 0 and crash.oom_evidence is None:
        crash.kind = "unknown"


def _enter_crashed(state: RunState, ts: str | None) -> None:
    c = _ctx(state)
    c.phase_before, c.phase_since_before = state.phase, state.phase_since
    state.phase = "crashed"
    state.phase_since = ts or state.last_ts


def _commit_pending(state: RunState) -> None:
    """The pending traceback was the end: it is the crash."""
    c = _ctx(state)
    if c.pending is None or state.crash is not None:
        return
    state.crash, c.pending = c.pending, None
    _add_frame(state)
    _enter_crashed(state, None)


def end_of_input(state: RunState) -> None:
    """The whole input has been read (a file, an excerpt): a traceback nothing came after is the
    crash the log shows."""
    _commit_pending(state)


def _add_frame(state: RunState) -> None:
    """The traceback frame that names the phase is one of the lines an operator must read."""
    c = _ctx(state)
    found = _deciding_frame(c.frames) if c.exc_seen else None
    if found is not None and state.crash is not None:
        _add_decisive(state.crash, _frame_words(found[1]))


def _oom_kill_kind(state: RunState, evidence: str | None = None) -> str:
    """The kind of a SIGKILL with no error of the server's own before it. An OOM kill only with
    evidence: a kernel/Slurm OOM line (seen, or `evidence` from the host), or the host cache
    pinning host memory at that moment (its `Allocating … host memory` lines, before ready).
    Without it the sender is not known: `killed_by_signal`."""
    if state.host_cache_allocating_ranks and not state.ready_in_log:
        return HOST_CACHE_SHORT
    if evidence or _ctx(state).oom_line:
        return "host_oom_killed"
    return KILLED_BY_SIGNAL


def _sigkill_crash(state: RunState, event: ev.Event, message: str | None = None, evidence: str | None = None) -> None:
    """A process of the server got SIGKILL: the crash is an OOM kill only with evidence."""
    kind = _oom_kill_kind(state, evidence)
    _crash(state, event, kind, message)
    crash = state.crash
    if crash is not None and crash.kind == kind and crash.line == event.line and kind != KILLED_BY_SIGNAL:
        crash.oom_evidence = crash.oom_evidence or _oom_evidence(state, evidence)


def _oom_proven(state: RunState, event: ev.Event, evidence: str | None = None) -> None:
    """Evidence of an OOM kill arrived after the SIGKILL was told (a kernel line, the host's
    memory.events): the crash it explains becomes what it is."""
    crash = state.crash
    if crash is None or crash.kind not in (KILLED_BY_SIGNAL, *_VAGUE_KINDS):
        return
    if crash.kind in _VAGUE_KINDS and signal_of(crash.exit_code) != 9:
        return  # an unexplained error that ended otherwise: the OOM line is context, not its cause
    crash.kind = _oom_kill_kind(state, evidence or "the log")
    crash.oom_evidence = crash.oom_evidence or _oom_evidence(state, evidence)
    crash.phase, crash.phase_reason = _crash_phase(state, crash.kind, event)


def _oom_evidence(state: RunState, evidence: str | None = None) -> str | None:
    """What proves an OOM kill, in words, or None."""
    line = _ctx(state).oom_line
    if line is not None:
        return f"the log's OOM line: {line.strip()[:200]}"
    if evidence:
        return evidence
    if state.host_cache_allocating_ranks and not state.ready_in_log:
        return "the host cache was pinning its host memory (`Allocating … host memory`) when it was killed"
    return None


# Lines that prove an OOM kill, from the kernel (mm/oom_kill.c: `Out of memory: Killed process N (comm)`,
# before 5.x `Out of memory: Kill process N (comm) score …` then `Killed process N (comm) total-vm…`;
# `Memory cgroup out of memory: …`; `comm invoked oom-killer:`; `oom-kill:constraint=…`;
# `oom_reaper: reaped process N`) or from Slurm's cgroup plugin (`Detected N oom_kill event(s) in
# StepId=…`, older `oom-kill event(s)`; `srun: error: node: task 0: Out Of Memory`; the step's
# `exceeded memory limit (A > B), being killed`), wherever a dmesg/journal/job prefix puts them.
_OOM_LINE = re.compile(
    r"Out of memory: Kill(?:ed)? process \d+|Memory cgroup out of memory|invoked oom-killer|oom-kill:constraint="
    r"|oom_reaper: reaped process|(?<![\w-])Killed process \d+ \(|Detected \d+ oom[_-]kill event"
    r"|: task \d+(?:-\d+)?: Out Of Memory|exceeded memory limit \(\d+ > \d+\), being killed"
    r"|killed by the cgroup out-of-memory handler"
)


def is_oom_kill_line(text: str) -> bool:
    """Does this line prove an OOM kill (the kernel's or Slurm's own words)? The shell's bare
    `Killed` does not: it prints that for any SIGKILL."""
    if "oom" not in text and "emory" not in text and "Killed process" not in text:
        return False  # most lines: a substring test, no regex
    return _OOM_LINE.search(text) is not None


def killed_by_words(exit_code: int | None) -> str:
    """`killed by signal 9 (SIGKILL)` for an exit code that is a signal (-N, 128+N); "" otherwise."""
    sig = signal_of(exit_code)
    if sig is None:
        return ""
    name = SIGNAL_WORDS.get(sig, (f"signal {sig}", ""))[0]
    return f"killed by signal {sig} ({name})" if name.startswith("SIG") else f"killed by signal {sig}"


# Who may have sent a SIGKILL that nothing in the log or on the host explains.
SIGKILL_SENDERS = ("an operator (`kill -9`), a job scheduler such as Slurm at the job's time limit, a "
                   "supervisor (systemd, Kubernetes, a watchdog script), or the kernel's OOM killer")


# ---- handlers -----------------------------------------------------------------------------------


def killed_finding_words(crash: Crash, who: str, where: str) -> str:
    """The finding's words for a SIGKILL, one sentence for every engine: `killed_by_signal` names
    the signal and who could have sent it, never a cause; `host_oom_killed` names its evidence."""
    told = f"line {crash.line}" if crash.line else f"exit code {crash.exit_code}"
    killed = killed_by_words(crash.exit_code if signal_of(crash.exit_code) is not None else -9)
    if crash.kind == "host_oom_killed":
        return (f"{who} was {killed}{where} ({told}) by the kernel's OOM killer: "
                f"{crash.oom_evidence or 'an OOM line in the log'}.")
    return (f"{who} was {killed}{where} ({told}) with no error of its own before it. Who sent it is not "
            f"known: {SIGKILL_SENDERS}. Nothing shows memory pressure (no kernel or Slurm OOM line in the log, "
            "and the host's cgroup oom_kill counter, where Cockpit could read it, did not rise), so no memory "
            "setting is changed. On the host, `dmesg -T | grep -i oom` (or `journalctl -k`) shows whether "
            "it was the OOM killer; `sacct -j JOB` whether Slurm ended the job.")
