"""One gate (cockpit/preflight/gate.py) between a profile and its launch: `up` builds the argv per
node once and the target launches that very argv; `check`, `up` and the picker give the same
findings for one profile; a flag the server refuses is the gate's bad input (exit 2), a critical
finding its refusal (exit 1). Real runs on the simulator, real subprocesses, the real TUI."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.commands.test_cli_ops import Env, _make_env

HICACHE_MISTAKE = "  enable-hierarchical-cache: true\n  hicache-size: 300\n"


def _in_process(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process sees what `env.cockpit(...)` gives a subprocess (its HOME, dirs, run root, GPUs)."""
    for key in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "COCKPIT_RUNS_ROOT", "COCKPIT_SIM_GPU_DIR"):
        monkeypatch.setenv(key, env.env[key])
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.chdir(env.root)


def _count_argv_builds(monkeypatch: pytest.MonkeyPatch) -> list[list[list[str]]]:
    """Every argv set the backend builds from now on (the real method runs: this only counts)."""
    from cockpit.backends import get_backend

    cls = type(get_backend("sglang").launch)  # the launch group builds the argvs
    real = cls.node_argvs
    built: list[list[list[str]]] = []

    def counted(self: Any, *args: Any, **kwargs: Any) -> list[list[str]]:
        out = real(self, *args, **kwargs)
        built.append(out)
        return out

    monkeypatch.setattr(cls, "node_argvs", counted)
    return built


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")


def test_up_builds_the_argv_once_and_the_target_launches_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from cockpit.cli import main
    from cockpit.supervisor.supervisor import Supervisor

    env = _make_env(tmp_path, ["local"])
    _in_process(env, monkeypatch)
    built = _count_argv_builds(monkeypatch)
    handed: list[list[list[str]] | None] = []
    real_start = Supervisor.start

    async def start(self: Supervisor, plan: Any, *args: Any, **kwargs: Any) -> Any:
        handed.append(plan.argvs)
        return await real_start(self, plan, *args, **kwargs)

    monkeypatch.setattr(Supervisor, "start", start)
    try:
        rc = main(["up", "simtest", "--set", "mem-fraction-static=0.8", "--wait", "started", "--timeout", "60"])
        out = capsys.readouterr()
        assert rc == 0, out
        # once: by the gate; the Supervisor was handed that argv, and its target built none
        assert len(built) == 1, built
        assert handed == [built[0]]
        pid = int(re.search(r"\(pid (\d+)\)", out.out).group(1))  # type: ignore[union-attr]
        argv = built[0][0]
        assert "--mem-fraction-static" in argv and argv[argv.index("--mem-fraction-static") + 1] == "0.8"
        assert _cmdline(pid) == argv  # the server runs the gate's argv, word for word
    finally:
        env.cockpit("down", "simtest", "--timeout", "5")


def _findings_of_check(env: Env) -> list[dict[str, Any]]:
    chk = env.cockpit("check", "simtest", "--json")
    assert chk.returncode == 1, chk.stderr
    return list(json.loads(chk.stdout)["findings"])


async def _findings_of_picker(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    from cockpit.ui.app import CockpitApp
    from cockpit.ui.screens.picker import PickerScreen

    _in_process(env, monkeypatch)
    app = CockpitApp(supervisor_factory=None, extra_profiles=[env.profile])
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PickerScreen)
        screen.query_one("#picker-list").highlighted = screen.paths.index(env.profile)  # type: ignore[attr-defined]
        for _ in range(1200):  # up to the picker's own measurement bound (MEASURE_TIMEOUT_S)
            await pilot.pause(0.05)
            pv = screen.preview
            if (pv is not None and pv.path == env.profile and not pv.measured.startswith("measuring")
                    and any(f.id == "memory_plan" for f in pv.findings)):
                break
        pv = screen.preview
        assert pv is not None and pv.measured == "facts measured on the hosts", pv.measured if pv else None
        await pilot.press("q")
        return list(pv.findings)


async def test_check_up_and_the_picker_give_the_same_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The story's HiCache mistake in the profile itself: `check` lists it, `up` refuses with the
    same findings, the picker's measured preview shows the same ones (the plan among them)."""
    env = _make_env(tmp_path, ["local"], extra_server=HICACHE_MISTAKE)
    checked = await asyncio.to_thread(_findings_of_check, env)
    ids = sorted((f["id"], f["severity"]) for f in checked)
    assert ("hicache_host_memory", "critical") in ids, ids

    up = await asyncio.to_thread(env.cockpit, "up", "simtest")
    assert up.returncode == 1 and "refused before launch" in up.stderr, up.stderr
    said = sorted(re.findall(r"^  \S+ ([A-Z]+) (\w+):", up.stderr, re.M))
    # up refuses on the preflight findings before it speaks of the plan (check lists both)
    assert [(i, s.lower()) for s, i in said] == [p for p in ids if p[0] != "memory_plan"], up.stderr
    assert not env.runs_dir("simtest").exists() or not any(env.runs_dir("simtest").iterdir())

    shown = await _findings_of_picker(env, monkeypatch)
    assert sorted((f.id, f.severity) for f in shown) == ids
    by_id = {f["id"]: f["message"] for f in checked}
    for f in shown:  # the same words (host RAM is measured again by each: the numbers may move)
        assert f.message.split(",")[0] == by_id[f.id].split(",")[0], (f.message, by_id[f.id])


def test_a_flag_the_server_refuses_is_the_gates_bad_input(tmp_path: Path) -> None:
    """Exit 2, one line naming the flag, no traceback, nothing measured or launched; a critical
    finding exits 1 (the refusal), as before the gate."""
    env = _make_env(tmp_path, ["local"], extra_server="  chunked-prefill-size: lots\n")
    for args in (("up", "simtest"), ("check", "simtest")):
        done = env.cockpit(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "chunked-prefill-size" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not env.runs_dir("simtest").exists() or not any(env.runs_dir("simtest").iterdir())


def test_the_gate_without_measuring_asks_no_host(tmp_path: Path) -> None:
    """The picker's first preview: the argv built, this machine's facts only, node 0 not asked; a
    refused flag is the verdict `bad-input` with the backend's error, and no argv."""
    from cockpit.core.profile import load_profile
    from cockpit.preflight import gate

    env = _make_env(tmp_path, ["ssh-host-that-does-not-exist.invalid"])
    profile = load_profile(env.profile)
    res = asyncio.run(gate(profile, measure=False, plan=False))
    assert res.verdict() == "go" and not res.measured and res.unreachable == {}
    assert res.argvs is not None and len(res.argvs) == 1 and res.argvs[0][:3] == [sys.executable, "-m", "cockpit"]
    assert [f.source for f in res.facts] == ["unknown"]
    bad = asyncio.run(gate(profile, {"tp": "eight"}, measure=False, plan=False))
    assert bad.verdict() == "bad-input" and bad.argvs is None and "tp" in str(bad.bad_input)
    with pytest.raises(ValueError):
        bad.node_argvs()


async def test_the_dashboards_launch_runs_the_gates_argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dashboard's run control launches through the same gate, over the run's own nodes: one
    argv built (by the gate: its target builds none), and the server runs it."""
    from cockpit.core.profile import load_profile
    from tests.reliability.helpers import sim_profile
    from tests.ui.test_runcontrol import Seen, control_for, launched, until

    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    for key, val in (("COCKPIT_RUNS_ROOT", tmp_path / "runs"), ("COCKPIT_SIM_GPU_DIR", sim_dir),
                     ("XDG_DATA_HOME", tmp_path / "data")):
        monkeypatch.setenv(key, str(val))
    path = tmp_path / "gt.yaml"
    path.write_text(sim_profile("gt", "local", tmp_path, sim_dir, tp=2))
    built = _count_argv_builds(monkeypatch)
    seen = Seen()
    control = control_for(load_profile(path), seen)
    async with launched(control):
        await until(lambda: control.run_info is not None, 60, "the launch", seen)
        assert len(built) == 1, built
        info = control.run_info
        assert info is not None and info.pid is not None
        assert _cmdline(info.pid) == built[0][0]
        await control.stop()


def test_check_sees_the_simulated_gpus_a_launch_sees(tmp_path: Path) -> None:
    """A simulator profile whose GPUs are named only in its env: `check` measures them as `up`'s
    gate and the picker do (before the gate, `check` read this machine without them — GPUs
    unknown, source psutil — while `up` and the picker preflighted and planned on eight)."""
    from cockpit.sim.gpus import write_devices
    from cockpit.sim.presets import GPUS

    env = _make_env(tmp_path, ["local"])
    gpus = tmp_path / "profile-gpus"
    gpus.mkdir()
    write_devices(gpus, GPUS["rtx-pro-6000"], 8)
    env.profile.write_text(env.profile.read_text().replace(str(env.sim_dir), str(gpus)))
    env.env.pop("COCKPIT_SIM_GPU_DIR")
    done = env.cockpit("check", "simtest", "--json")
    assert done.returncode in (0, 1), done.stderr
    host = json.loads(done.stdout)["hosts"][0]
    assert host["gpu_count"] == 8 and host["source"] == "agent", host
    assert host["gpu_mem_total_gib"] is not None and round(host["mem_total_gb"], 2) == host["mem_total_gb"], host
