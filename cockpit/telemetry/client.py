"""Telemetry from a host: runs the agent through a transport and turns its JSON lines into samples.

The agent (cockpit/remote/programs/agent.py) is sent as source over stdin and run with the profile's
python, so nothing has to be installed on the GPU host. On this machine, when NVML works and no
simulator is asked for, NVML is read in-process instead (cockpit/telemetry/nvml.py).

Units: GPU memory in GiB (MiB / 1024) like nvidia-smi and SGLang print it; host RAM in decimal
GB like `free -g` does not but SGLang's --hicache-size does. Unknown stays None.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncGenerator, Iterable, Mapping
from functools import cache

from cockpit.core.backoff import exponential
from cockpit.remote import programs
from cockpit.telemetry import nvml
from cockpit.telemetry.samples import TelemetrySample, sample_from_agent
from cockpit.transport.base import HostKeyError, Transport, TransportError
from cockpit.transport.local import LocalTransport

log = logging.getLogger(__name__)

RESTART_BACKOFF_CAP_S = 30.0
MAX_LINE_BYTES = 1 << 20  # a line longer than this is garbage, not a sample


@cache
def agent_source() -> bytes:
    """The agent program as sent to the host."""
    return programs.assemble(programs.AGENT_PROGRAM)


def parse_line(line: bytes | str, host_label: str) -> TelemetrySample | None:
    """One line of agent output; None for anything that is not a sample (banners, garbage)."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", "replace")
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or "ts" not in obj:
        return None
    return sample_from_agent(obj, host_label)


def _agent_argv(python: str, interval: float, pids: Iterable[int], once: bool) -> list[str]:
    argv = [python, "-", "--interval", f"{interval:g}"]
    pid_list = ",".join(str(int(p)) for p in pids)
    if pid_list:
        argv += ["--pids", pid_list]
    if once:
        argv.append("--once")
    return argv


def _sim_requested(env: Mapping[str, str] | None) -> bool:
    return bool((env or {}).get("COCKPIT_SIM_GPU_DIR") or os.environ.get("COCKPIT_SIM_GPU_DIR"))


def _use_local_nvml(transport: Transport, env: Mapping[str, str] | None) -> bool:
    if not isinstance(transport, LocalTransport) or _sim_requested(env):
        return False

    return nvml.available()


def _error_sample(label: str, message: str) -> TelemetrySample:
    return TelemetrySample(host_label=label, sampled_at=time.time(), source="none", errors=(message,))


async def stream_telemetry(
    transport: Transport,
    python: str = "python3",
    *,
    interval: float = 1.0,
    pids: Iterable[int] = (),
    env: Mapping[str, str] | None = None,
    max_restarts: int | None = None,
) -> AsyncGenerator[TelemetrySample, None]:
    """Samples from `transport`'s host, forever (until the consumer stops iterating).

    When the agent dies or cannot start, a sample with source "none" and the reason in `errors`
    is yielded, and the agent is restarted after 1, 2, 4 … s (capped). A refused host key is not
    something a retry fixes: HostKeyError propagates.
    """
    label = transport.label
    pid_list = [int(p) for p in pids]
    if _use_local_nvml(transport, env):
        while True:
            started = time.monotonic()
            yield await asyncio.to_thread(nvml.read_sample, label, pid_list)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    argv = _agent_argv(python, interval, pid_list, once=False)
    failures = 0
    restarts = 0
    while True:
        reason = ""
        got_sample = False
        stream = None
        try:
            stream = await transport.stream(argv, stdin=agent_source(), env=env)
            buf = b""
            async for chunk in stream.chunks():
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    sample = parse_line(line, label)
                    if sample is not None:
                        got_sample = True
                        failures = 0
                        yield sample
                if len(buf) > MAX_LINE_BYTES:
                    buf = b""
            tail = getattr(stream, "stderr_tail", "") or ""
            last = tail.strip().splitlines()[-1] if tail.strip() else ""
            reason = f"telemetry agent exited with status {stream.returncode}" + (f": {last}" if last else "")
        except HostKeyError:
            raise
        except TransportError as exc:
            reason = f"telemetry agent could not run: {exc}"
        finally:
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.close()
        if not got_sample:
            failures += 1
        restarts += 1
        log.debug("telemetry on %s: %s", label, reason)
        yield _error_sample(label, reason)
        if max_restarts is not None and restarts > max_restarts:
            return
        await asyncio.sleep(exponential(failures, 1.0, RESTART_BACKOFF_CAP_S))


async def sample_once(
    transport: Transport,
    python: str = "python3",
    *,
    pids: Iterable[int] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> TelemetrySample:
    """One sample now (preflight, "are the GPUs free yet?"). Raises TransportError when it can't."""
    pid_list = [int(p) for p in pids]
    if _use_local_nvml(transport, env):
        return await asyncio.to_thread(nvml.read_sample, transport.label, pid_list)
    res = await transport.run(
        _agent_argv(python, 1.0, pid_list, once=True), stdin=agent_source(), env=env, timeout=timeout
    )
    for line in res.stdout.splitlines():
        sample = parse_line(line, transport.label)
        if sample is not None:
            return sample
    err = res.stderr.decode("utf-8", "replace").strip().splitlines()
    raise TransportError(
        f"{transport.label}: telemetry agent gave no sample (exit {res.returncode})"
        + (f": {err[-1]}" if err else ""),
        hint=f"check that {python} runs on {transport.label}",
    )
