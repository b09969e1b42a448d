"""Cockpit's lifecycle on the REAL vLLM (its CPU build): launch, follow, crash, stop — locally and
through the loopback sshd (host alias gpu-box-1, the same machine).

Each launch costs ~60–90 s of CPU on 2 cores, so the engines are few and each carries several
assertions (`-O0`: no torch.compile warm-up):

- an SSH `python -m vllm.entrypoints.openai.api_server --model …` run to READY: the profile's model
  is served (not vLLM's default), then VLLM::EngineCore SIGKILLed mid-request: the API server exits 0
  and the run is CRASHED (not stopped), journal row `crashed`, no orphan left;
- an outside SIGTERM to a READY server (vLLM exits 0) is "ended unexpectedly", not stopped; a
  `cockpit down` over SSH while it starts (EngineCore and Worker already spawned) is `stopped`;
  neither leaves a process of the run;
- wide-kv-llama with --max-model-len 65536 in a 1 GiB KV cache: init_not_enough_memory with vLLM's
  own estimate as the change and the knob that sized the cache (VLLM_CPU_KVCACHE_SPACE) named;
- no engine at all: a bound port and a missing model path are critical in `check` and refused by `up`.

Processes are found by the run's own records (its run directory's pid and `tree` files, its
session), never by name; every engine is stopped by `cockpit down` or, failing that, by the
recorded process group.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.real_engine.conftest import RealVllm
from tests.real_engine.lifecycle_kit import (
    FAST,
    READY_TIMEOUT_S,
    Cockpit,
    api_port_of,
    cockpit,
    finding,
    journal,
    kill_mid_request,
    start_time,
)

pytestmark = pytest.mark.timeout(1500)


# ---------------------------------------------------------------- the api_server entry, over SSH


def test_api_server_entry_over_ssh_serves_the_profiles_model_and_an_enginecore_kill_is_a_crash(
        real_vllm: RealVllm, ssh_home: Any, tmp_path: Path, engine_lock: None) -> None:
    profile = real_vllm.profile(tmp_path, "apisrv", server=FAST, hosts=[{"ssh": "gpu-box-1"}],
                                program=[str(real_vllm.python), "-m", "vllm.entrypoints.openai.api_server"])
    ck = cockpit(tmp_path, profile, base_env={**os.environ, **ssh_home.env})
    try:
        chk = ck.run("check", str(profile), "--json")
        argv = json.loads(chk.stdout)["argv"]
        assert argv[argv.index("--model") + 1] == str(real_vllm.tiny), argv  # not the ignored positional
        up = ck.run("up", str(profile), "--wait", "ready", "--timeout", str(READY_TIMEOUT_S), timeout=READY_TIMEOUT_S + 60)
        assert up.returncode == 0, up.stdout + up.stderr
        port = api_port_of(profile)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as resp:
            models = [m["id"] for m in json.load(resp)["data"]]
        assert models == [str(real_vllm.tiny)], models  # the profile's model, not vLLM's default
        data = ck.status()
        assert data["phase"] == "ready" and data["format"].startswith("vllm-0.32."), data
        assert data["max_total_num_tokens"] == 1_048_576

        kill_mid_request(ck, port, str(real_vllm.tiny), "VLLM::EngineCore")
        data, took = ck.wait_phase(("crashed", "stopped"), 90)
        assert data["phase"] == "crashed", data  # the API server exits 0: nobody stopped it
        assert took < 30, f"crashed only {took:.1f} s after the kill"
        # the log said it first; the API server exits a moment later, with 0
        deadline = time.monotonic() + 60
        while not (ck.run_dir() / "exit_code").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert ck.recorded("exit_code") == 0
        data = ck.status()
        assert data["phase"] == "crashed", data
        assert data["ending"] == {"exit_code": 0, "signal": None, "by": "engine"}, data["ending"]
        f = finding(data, "process_died")
        assert "EngineCore" in f["message"], f
        ck.wait_no_process()
        assert journal(ck)[0]["outcome"] == "crashed"
    finally:
        ck.reap()


# ---------------------------------------------------------------- endings while starting


def _start_and_wait_for_engine(ck: Cockpit) -> None:
    up = ck.run("up", str(ck.profile), "--wait", "started", timeout=120)
    assert up.returncode == 0, up.stdout + up.stderr
    ck.process_named("VLLM::EngineCore")
    ck.process_named("VLLM::Worker")


def test_outside_sigterm_is_an_unexpected_end_and_leaves_nothing(real_vllm: RealVllm, tmp_path: Path,
                                                                engine_lock: None) -> None:
    # READY first: vLLM 0.32 swallows a SIGTERM that arrives while it initialises (its
    # KeyboardInterrupt is caught on the way) and comes up anyway
    ck = cockpit(tmp_path, real_vllm.profile(tmp_path, "termed", server=FAST))
    try:
        up = ck.run("up", str(ck.profile), "--wait", "ready", "--timeout", str(READY_TIMEOUT_S), timeout=READY_TIMEOUT_S + 60)
        assert up.returncode == 0, up.stdout + up.stderr
        os.kill(ck.recorded("pid"), signal.SIGTERM)  # an operator's `kill`, not Cockpit's stop
        data, _ = ck.wait_phase(("crashed", "stopped"), 60)
        assert data["phase"] == "crashed", data  # vLLM exits 0 after a SIGTERM: still nobody stopped it
        # said so in the message, unless vLLM printed a traceback on its way out (a SIGTERM landing
        # mid-shutdown): then that is the decisive line, and `ending` still says who ended it
        assert "ended unexpectedly" in data["crash"]["message"] or any(
            "Traceback" in ln for ln in data["crash"]["decisive_lines"]), data["crash"]
        assert data["ending"]["by"] == "external", data["ending"]
        assert not (ck.run_dir() / "stopped_by").exists()
        ck.wait_no_process()  # the orphaned EngineCore/Worker were ended by the run's waiter
        assert journal(ck)[0]["outcome"] == "crashed"
    finally:
        ck.reap()


def test_down_while_starting_over_ssh_leaves_no_process(real_vllm: RealVllm, ssh_home: Any, tmp_path: Path,
                                                        engine_lock: None) -> None:
    profile = real_vllm.profile(tmp_path, "downed", server=FAST, hosts=[{"ssh": "gpu-box-1"}])
    ck = cockpit(tmp_path, profile, base_env={**os.environ, **ssh_home.env})
    try:
        _start_and_wait_for_engine(ck)
        tree = ck.tree()
        down = ck.run("down", str(profile), "--timeout", "5")
        assert down.returncode == 0, down.stdout + down.stderr
        assert not [p for p, s in tree.items() if start_time(p) == s]
        ck.wait_no_process(5)
        data = ck.status()
        assert data["phase"] == "stopped" and data["ending"]["by"] == "operator", data["ending"]
        assert journal(ck)[0]["outcome"] == "stopped"
    finally:
        ck.reap()


# ---------------------------------------------------------------- a KV cache too small, a failed start


def test_kv_cache_too_small_for_max_model_len(real_vllm: RealVllm, tmp_path: Path, engine_lock: None) -> None:
    profile = real_vllm.profile(tmp_path, "widekv", server={**FAST, "model": str(real_vllm.wide_kv),
                                                            "max-model-len": 65536})
    ck = cockpit(tmp_path, profile)
    try:
        up = ck.run("up", str(profile), "--wait", "ready", "--timeout", str(READY_TIMEOUT_S), timeout=READY_TIMEOUT_S + 60)
        assert up.returncode == 1, up.stdout + up.stderr
        data = ck.status()
        assert data["phase"] == "crashed" and data["crash"]["kind"] == "init_not_enough_memory", data["crash"]
        f = finding(data, "init_not_enough_memory")
        # vLLM's own estimate of what fits (1 GiB / 32 KiB a token, less what its blocks round off)
        est = f["changes"][0]
        assert est["flag"] == "--max-model-len" and est["from"] == 65536 and 30_000 < est["to"] <= 32_768, f
        assert "VLLM_CPU_KVCACHE_SPACE" in f["message"] and "--gpu-memory-utilization" not in str(f["changes"]), f
        ck.wait_no_process()  # vLLM leaves its EngineCore behind a failed start: the waiter does not
        assert journal(ck)[0]["outcome"] == "crashed"
    finally:
        ck.reap()


# ---------------------------------------------------------------- refused before launch (no engine)


def test_bound_port_and_missing_model_are_critical_and_refused(real_vllm: RealVllm, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    profile = real_vllm.profile(tmp_path, "refused", server={"model": str(missing)})
    ck = cockpit(tmp_path, profile)
    with socket.socket() as s:
        s.bind(("127.0.0.1", api_port_of(profile)))
        s.listen()
        chk = ck.run("check", str(profile), "--json")
        assert chk.returncode == 1, chk.stdout + chk.stderr
        crit = {f["id"]: f for f in json.loads(chk.stdout)["findings"] if f["severity"] == "critical"}
        assert set(crit) >= {"model_path_missing", "port_in_use"}, crit
        assert str(missing) in crit["model_path_missing"]["message"]
        up = ck.run("up", str(profile), "--wait", "started")
        assert up.returncode == 1 and "refused before launch" in up.stderr, up.stdout + up.stderr
        assert "model_path_missing" in up.stderr and "port_in_use" in up.stderr
    assert not (Path(ck.env["COCKPIT_RUNS_ROOT"]) / "refused").exists() or not any(
        (Path(ck.env["COCKPIT_RUNS_ROOT"]) / "refused").glob("2*")), "a run was launched"


# ---------------------------------------------------------------- an illegal instruction

def test_an_engine_killed_by_sigill_is_named_an_illegal_instruction(real_vllm: RealVllm, tmp_path: Path,
                                                                    engine_lock: None) -> None:
    """Issue 22's SIGILL: vLLM loading a kernel built for instructions the CPU lacks dies of SIGILL
    (exit code 132), often before its first line. This host has AVX-512, so vLLM never loads a kernel
    it lacks: the real `vllm serve` process gets the signal the kernel would send, as it starts."""
    ck = cockpit(tmp_path, real_vllm.profile(tmp_path, "illegal", server=FAST))
    try:
        up = ck.run("up", str(ck.profile))
        assert up.returncode == 0, up.stdout + up.stderr
        os.kill(ck.recorded("pid"), signal.SIGILL)
        data, _ = ck.wait_phase(("crashed", "stopped"), 60)
        assert data["phase"] == "crashed", data
        assert data["crash"]["exit_code"] == 132, data["crash"]
        f = finding(data, "killed_by_signal")
        assert "SIGILL" in f["message"] and "instructions this CPU/GPU lacks" in f["message"], f
        assert "no known signature" not in json.dumps(data["findings"])
        ck.wait_no_process()
    finally:
        ck.reap()
