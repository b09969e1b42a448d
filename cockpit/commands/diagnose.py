"""`cockpit diagnose LOG… [--json] [--target-headroom-gb F] [--host-mem-gb G --gpu-mem-gb G --gpus N]`.

Each LOG is a file path or `-` (standard input, read as bytes). Several logs are read in order into
one state (e.g. a rotated log and its continuation). Which server wrote them (SGLang or vLLM) is
told from the opening of the first log: every backend scores how much it reads as its own
(`detect_backend`). Exit 0 when nothing is critical, 1 when a finding is critical, 2 on bad input,
always as one clear line: a missing or unreadable file, and a file in which no line is that
server's log line (a README, an empty or binary file) — "(no findings)" is printed only for a log
that was read and is healthy.

The what-if options are `check`'s: with the host's memory (and GPUs per node) a HiCache failure
seen in a log alone gets the per-rank `--hicache-size` that fits, with the arithmetic.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import math
import sys
from typing import Any, BinaryIO

from cockpit.face import (
    DEFAULT_BACKEND,
    BadInput,
    Finding,
    HostFacts,
    RunState,
    detect_backend,
    engine_name,
    engine_names,
    exit_code_for,
    foreign_lines,
    get_backend,
    plural,
    refusal,
)

CLASSIFY_CAP = 16 * 1024  # what both grammars read of one line (their CLASSIFY_CAP; the note quotes it)
SNIFF_BYTES = 64 * 1024  # the opening of a log that decides which server wrote it
# Below this share of recognised lines the report says how little of the file it could read.
PARTIAL_SHARE = 0.5


class FileRead:
    """How much of one file the parser could read. A plain class: a dataclass costs ~0.6 ms to
    create, 1 % of `cockpit diagnose`'s start-up, for an __eq__ and a __repr__ nobody uses."""

    __slots__ = ("cut", "foreign", "lines", "path", "recognised")

    def __init__(self, path: str, lines: int, recognised: int, foreign: int = 0, cut: int = 0) -> None:
        self.path = path
        self.lines = lines
        self.recognised = recognised
        self.foreign = foreign  # lines of another engine's log (vLLM)
        self.cut = cut  # lines longer than the grammar's cap, classified on their first 16 KiB


class _Replayed(io.RawIOBase):
    """Standard input with its opening read ahead: the opening first, then the rest of the pipe."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head = memoryview(head)
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read1(len(b)) if hasattr(self._rest, "read1") else self._rest.read(len(b))
        b[: len(data)] = data
        return len(data)


_stdin_head: bytes | None = None


def _stdin_opening() -> bytes:
    """Standard input's first SNIFF_BYTES, read once (waiting for them, as a file's are there at
    once): a pipe's peek gives only what it happens to hold, so the same bytes piped and read
    from a file would be judged on different samples."""
    global _stdin_head
    if _stdin_head is None:
        _stdin_head = sys.stdin.buffer.read(SNIFF_BYTES)
    return _stdin_head


def _stdin() -> BinaryIO:
    """Standard input for the parser: the opening read ahead, then the rest."""
    head = _stdin_opening()
    return io.BufferedReader(_Replayed(head, sys.stdin.buffer), buffer_size=1 << 16)


def _sniff(path: str) -> bytes:
    """The opening bytes of a log, the same SNIFF_BYTES for a file and for standard input (read
    ahead and handed to the parser before the rest)."""
    try:
        if path == "-":
            return _stdin_opening()
        with open(path, "rb") as f:
            return f.read(SNIFF_BYTES)
    except (OSError, AttributeError, ValueError):
        return b""  # the read reports an unreadable file


def backend_of(paths: list[str]) -> str:
    return detected_backend(paths) or DEFAULT_BACKEND


def detected_backend(paths: list[str]) -> str:
    """The backend whose lines the first log's opening reads as; "" when it reads as no server's
    (the default backend then reads it, but nothing about the file chose that engine)."""
    return detect_backend(_sniff(paths[0]), default="") if paths else ""


def refuse_foreign(paths: list[str]) -> None:
    """BadInput for a log of another program (llama.cpp, TGI, a benchmark client, …): enough of its
    opening's lines carry that program's marks and the rest reads as no engine of ours."""
    for path in paths:
        found = foreign_lines(_sniff(path))
        if found.label is None:
            continue
        reason = refusal(found, detect_backend(found.rest, default="") != "")
        if reason:
            raise BadInput(f"{'standard input' if path == '-' else path}: {reason}")


def read_logs(paths: list[str], reads: list[FileRead] | None = None, backend_name: str | None = None) -> RunState:
    backend = get_backend(backend_name or backend_of(paths))
    state: RunState | None = None
    if paths.count("-") > 1:
        raise BadInput("standard input (-) can be read only once")
    for path in paths:
        stats: dict[str, int] = {}
        try:
            src = _stdin() if path == "-" else path
            state = backend.logs.read(src, state, stats)
        except FileNotFoundError:
            raise BadInput(f"{path}: no such file") from None
        except IsADirectoryError:
            raise BadInput(f"{path}: is a directory, expected a log file") from None
        except PermissionError:
            raise BadInput(f"{path}: permission denied") from None
        except OSError as exc:
            raise BadInput(f"{path}: cannot be read ({exc.strerror or exc})") from None
        if reads is not None:
            reads.append(FileRead("standard input" if path == "-" else path, stats["lines"], stats["recognised"],
                                  stats.get("foreign", 0), stats.get("cut", 0)))
    assert state is not None  # argparse requires at least one LOG
    return state


def what_if_hosts(host_mem_gb: float | None, gpu_mem_gb: float | None, gpus: int | None) -> list[HostFacts]:
    """`check`'s what-if options as the one host this log ran on (none given: no host facts)."""
    if host_mem_gb is None and gpu_mem_gb is None and gpus is None:
        return []
    # host RAM in decimal GB (the unit of --hicache-size), GPU memory in GiB (nvidia-smi's, SGLang's)
    for name, val, hi, unit in (("--host-mem-gb", host_mem_gb, 1e6, "GB"), ("--gpu-mem-gb", gpu_mem_gb, 4096.0, "GiB")):
        if val is not None and not (math.isfinite(val) and 0 < val <= hi):
            raise BadInput(f"{name} {val:g}: expected a value between 0 and {hi:g} {unit}")
    if gpus is not None and not 1 <= gpus <= 1024:
        raise BadInput(f"--gpus {gpus}: expected a number of GPUs per node between 1 and 1024")
    return [HostFacts(host="what-if", mem_total_gb=host_mem_gb, mem_available_gb=host_mem_gb, gpu_count=gpus,
                      gpu_mem_total_gib=gpu_mem_gb, source="override")]


def diagnose_logs(
    paths: list[str],
    *,
    target_headroom_gb: float | None = None,
    hosts: list[HostFacts] | None = None,
) -> tuple[RunState, list[Finding], list[FileRead]]:
    """What `cockpit diagnose` computes (the CLI prints it; the corpus tests call this directly).
    Raises BadInput for a file with no line of the server's log in it."""
    reads: list[FileRead] = []
    refuse_foreign(paths)
    detected = detected_backend(paths)
    name = detected or DEFAULT_BACKEND
    state = read_logs(paths, reads, name)
    for r in reads:
        if r.recognised == 0:
            # Name the engine whose log it was read as; when nothing read as any engine's (an empty,
            # binary or prose first file) the default one was only a fallback: say that none matched.
            engines = engine_name(name) if detected or any(x.recognised for x in reads) else engine_names()
            raise BadInput(f"no {engines} log lines recognised in {r.path} ({r.lines:,} lines read)")
    backend = get_backend(name)
    doctor = backend.doctor
    if doctor is None:  # an engine without advice: its log is still read and shown, and this said
        return state, [Finding("advice_unavailable", "info", f"advice unavailable for this engine "
                               f"({backend.words().display}): the log is read, no rule of the engine judges it")], reads
    findings = doctor.diagnose(state, hosts=hosts or (), target_headroom_gb=target_headroom_gb)
    return state, findings, reads


def to_json(state: RunState, findings: list[Finding], reads: list[FileRead]) -> dict[str, Any]:
    out = state.to_json()
    out["lines"] = {
        "read": sum(r.lines for r in reads),
        "recognised": sum(r.recognised for r in reads),
        "unparsed": state.lines_unparsed,
        "cut": sum(r.cut for r in reads),
    }
    out["findings"] = [f.to_json() for f in findings]
    return _finite(out)


def _finite(obj: Any) -> Any:
    """Strict JSON: a float that is not finite has no JSON spelling; it is unknown (null)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def read_note(reads: list[FileRead], unparsed: int, backend: str = DEFAULT_BACKEND) -> str | None:
    """One line when the parser could read only part of the input."""
    lines = sum(r.lines for r in reads)
    recognised = sum(r.recognised for r in reads)
    parts = []
    if lines and recognised < PARTIAL_SHARE * lines:
        parts.append(f"recognised {recognised:,} of {lines:,} lines as {engine_name(backend)}'s ({100 * recognised / lines:.0f} %); "
                     "the rest was skipped")
    if unparsed:
        parts.append(f"{plural(unparsed, 'recognised line')} held figures that do not parse or cannot be; skipped")
    cut = sum(r.cut for r in reads)
    if cut:
        parts.append(f"{plural(cut, 'line')} longer than {CLASSIFY_CAP // 1024} KiB: only their first {CLASSIFY_CAP // 1024} KiB "
                     "were read")
    return "note: " + "; ".join(parts) if parts else None


def run(args: argparse.Namespace) -> int:
    target = args.target_headroom_gb
    if target is not None and not 0 < target <= 200:
        raise BadInput(f"--target-headroom-gb {target:g}: expected a value between 0 and 200 GiB")
    hosts = what_if_hosts(getattr(args, "host_mem_gb", None), getattr(args, "gpu_mem_gb", None),
                          getattr(args, "gpus", None))
    # Everything imported so far lives as long as this one-shot command: set it aside so the
    # collections that parsing triggers do not walk it again (~3 ms of a 1M-line diagnose).
    gc.freeze()
    state, findings, reads = diagnose_logs(list(args.logs), target_headroom_gb=target, hosts=hosts)
    if args.json:
        print(json.dumps(to_json(state, findings, reads), indent=2, allow_nan=False))
    else:
        from cockpit.commands.render import render_state

        title = ", ".join(args.logs)
        text = render_state(state, findings, title=f"diagnose {title}")
        note = read_note(reads, state.lines_unparsed, state.backend)
        if note:
            first, _, rest = text.partition("\n")
            text = f"{first}\n{note}\n{rest}"
        sys.stdout.write(text)
    return exit_code_for(findings)
