"""Cockpit itself killed: `cockpit up` and a supervisor process SIGKILLed mid-run leave the
server running, `cockpit status` re-attaches, the journal passes PRAGMA integrity_check; two
cockpits on one profile never launch twice."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from tests.reliability.helpers import PY, CockpitEnv, alive, make_env, session_pids, sim_profile, wait_for

SUPERVISE = str(Path(__file__).with_name("_supervise.py"))


def _env(tmp_path: Path, name: str, speed: str = "60") -> CockpitEnv:
    env = make_env(tmp_path)
    sim = tmp_path / "gpus"
    sim.mkdir()
    env.env["COCKPIT_SIM_GPU_DIR"] = str(sim)
    env.write_profile(name, sim_profile(name, "local", tmp_path, sim, speed=speed, tp=2))
    return env


def _integrity(env: CockpitEnv) -> str:
    db = env.journal / "journal.sqlite3"
    assert db.exists(), "no journal was written"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return str(con.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        con.close()


def _status(env: CockpitEnv, name: str) -> dict:
    st = env.cockpit("status", name, "--json", timeout=60)
    assert st.returncode in (0, 1), st.stderr
    data: dict = json.loads(st.stdout)
    return data


def test_killed_cockpit_up_and_supervisors_leave_the_server_and_journal_intact(tmp_path: Path, ledger) -> None:
    env = _env(tmp_path, "killme")
    rnd = random.Random(3)
    try:
        up = env.popen("up", "killme", "--wait", "ready", "--timeout", "90")
        # killed while the server starts: right after the run directory names the new run
        assert wait_for(lambda: (env.runs_root / "killme" / "current").exists(), 60)
        run_dir = env.current_run("killme")
        assert wait_for(lambda: (run_dir / "pid").exists(), 30)
        time.sleep(rnd.uniform(0.1, 0.6))
        up.send_signal(signal.SIGKILL)
        up.wait(10)
        ledger.fault("cockpit")
        pid = int((run_dir / "pid").read_text())
        assert alive(pid)
        # a fresh cockpit re-attaches and follows the same server to readiness
        assert wait_for(lambda: _status(env, "killme")["phase"] == "ready", 60, step=0.5)
        data = _status(env, "killme")
        assert data["run"]["pid"] == pid and data["lifecycle"] == "running"
        ledger.survive("cockpit")
        # supervisor processes (journal open, following) killed at random moments, 3 times
        for i in range(3):
            sup = subprocess.Popen([PY, SUPERVISE, str(env.root / "profiles/killme.yaml")], env=env.env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=env.root)
            assert sup.stdout is not None
            line = sup.stdout.readline()
            assert line, sup.stderr.read() if sup.stderr else b""
            seen = json.loads(line)
            assert seen["pid"] == pid, (i, seen)  # attached, never a second launch
            time.sleep(rnd.uniform(0.2, 2.0))
            sup.send_signal(signal.SIGKILL)
            sup.wait(10)
            ledger.fault("cockpit")
            assert alive(pid)
            assert _integrity(env) == "ok"
            ledger.survive("cockpit")
        log_size = (tmp_path / "work/logs/killme.log").stat().st_size
        time.sleep(1.0)
        assert (tmp_path / "work/logs/killme.log").stat().st_size > log_size  # still serving, still logging
        data = _status(env, "killme")
        assert data["run"]["pid"] == pid and data["phase"] == "ready"
        again = env.cockpit("up", "killme")
        assert again.returncode == 1 and "already running" in again.stderr
        assert len([d for d in (env.runs_root / "killme").iterdir() if d.is_dir()]) == 1
        runs = json.loads(env.cockpit("runs", "--json").stdout)
        assert [r["id"] for r in runs] == [run_dir.name], runs
        down = env.cockpit("down", "killme", "--timeout", "10")
        assert down.returncode == 0, down.stdout + down.stderr
        assert _integrity(env) == "ok"
    finally:
        env.cockpit("down", "killme", "--timeout", "3")


def test_two_cockpits_on_one_profile_launch_once(tmp_path: Path, ledger) -> None:
    env = _env(tmp_path, "twice", speed="200")
    try:
        a = env.popen("up", "twice", "--wait", "started", "--timeout", "60")
        b = env.popen("up", "twice", "--wait", "started", "--timeout", "60")
        outs = [p.communicate(timeout=120) for p in (a, b)]
        codes = sorted([a.returncode, b.returncode])
        ledger.fault("cockpit")
        assert codes == [0, 1], (codes, outs)
        refused = outs[0] if a.returncode == 1 else outs[1]
        assert b"already running" in refused[1], refused
        dirs = [d for d in (env.runs_root / "twice").iterdir() if d.is_dir()]
        assert len(dirs) == 1
        run_dir = dirs[0]
        sid = int((run_dir / "sid").read_text())
        pid = int((run_dir / "pid").read_text())
        # two more supervisors racing with attach: both attach to that one run
        sups = [subprocess.Popen([PY, SUPERVISE, str(env.root / "profiles/twice.yaml")], env=env.env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=env.root) for _ in range(2)]
        try:
            for s in sups:
                assert s.stdout is not None
                line = s.stdout.readline()
                assert line, s.stderr.read() if s.stderr else b""
                assert json.loads(line)["pid"] == pid
        finally:
            for s in sups:
                s.kill()
                s.wait()
        assert len([d for d in (env.runs_root / "twice").iterdir() if d.is_dir()]) == 1
        waiter = int((run_dir / "waiter_pid").read_text())
        assert pid in session_pids(sid, exclude=(waiter,))
        ledger.survive("cockpit")
    finally:
        env.cockpit("down", "twice", "--timeout", "3")


def test_closed_terminal_hangs_up_the_cockpit_not_the_server(tmp_path: Path, ledger) -> None:
    # a tmux pane or an SSH session to the jump host closing: SIGHUP to the cockpit's whole process group
    env = _env(tmp_path, "hup", speed="60")
    try:
        up = subprocess.Popen([PY, "-m", "cockpit", "up", "hup", "--wait", "ready", "--timeout", "90"], env=env.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=env.root,
                              start_new_session=True)
        assert wait_for(lambda: (env.runs_root / "hup" / "current").exists(), 60)
        run_dir = env.current_run("hup")
        assert wait_for(lambda: (run_dir / "pid").exists(), 30)
        os.killpg(up.pid, signal.SIGHUP)
        up.wait(10)
        ledger.fault("cockpit")
        pid = int((run_dir / "pid").read_text())
        time.sleep(0.5)
        assert alive(pid)
        assert wait_for(lambda: _status(env, "hup")["phase"] == "ready", 60, step=0.5)
        ledger.survive("cockpit")
    finally:
        env.cockpit("down", "hup", "--timeout", "3")


async def test_a_stop_from_another_cockpit_reads_as_stopped_not_crashed(tmp_path: Path, ledger) -> None:
    import asyncio
    import contextlib

    import yaml

    from cockpit.core.profile import parse_profile
    from cockpit.supervisor.supervisor import Supervisor

    env = _env(tmp_path, "other", speed="200")
    prof = parse_profile(yaml.safe_load((env.root / "profiles/other.yaml").read_text()), "other.yaml")
    watcher = Supervisor(prof, runs_root=str(env.runs_root))
    up = await asyncio.to_thread(env.cockpit, "up", "other", "--wait", "ready", "--timeout", "60")
    assert up.returncode == 0, up.stdout + up.stderr
    assert await watcher.attach() is not None
    runner = asyncio.create_task(watcher.run())
    try:
        assert await watcher.wait_until(lambda s: s.state_phase == "ready", 30)
        down = await asyncio.to_thread(env.cockpit, "down", "other", "--timeout", "10")
        assert down.returncode == 0, down.stdout + down.stderr
        ledger.fault("cockpit")
        assert await watcher.wait_until(lambda s: s.any_exited, 15)
        await asyncio.sleep(0.3)
        snap = watcher.snapshot()
        assert snap.state.phase == "stopped" and snap.state.crash is None, (snap.state.phase, snap.state.crash)
        assert snap.lifecycle == "stopped", snap.lifecycle
        ledger.survive("cockpit")
    finally:
        await watcher.close()
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
        env.cockpit("down", "other", "--timeout", "3")


STUBBORN = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(300)\n"


async def test_a_stop_that_needs_sigkill_from_another_cockpit_reads_as_stopped(tmp_path: Path, ledger) -> None:
    # SGLang often outlives SIGTERM and gets SIGKILLed by the stop (exit 137): a cockpit watching
    # from another pane must not report that as a crash (nor journal it as one).
    import asyncio
    import contextlib

    from cockpit.core.profile import parse_profile
    from cockpit.supervisor.supervisor import Supervisor

    env = make_env(tmp_path)
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    data = {"name": "stub", "program": [PY, str(script)], "workdir": str(tmp_path / "w"), "log": "s.log"}
    env.write_profile("stub", json.dumps(data))
    up = await asyncio.to_thread(env.cockpit, "up", "stub", "--wait", "started", "--timeout", "30")
    assert up.returncode == 0, up.stdout + up.stderr
    watcher = Supervisor(parse_profile(data, "stub.yaml"), runs_root=str(env.runs_root))
    assert await watcher.attach() is not None
    runner = asyncio.create_task(watcher.run())
    try:
        await asyncio.sleep(0.5)
        down = await asyncio.to_thread(env.cockpit, "down", "stub", "--timeout", "1")
        assert down.returncode == 0 and "SIGKILL" in down.stdout, down.stdout + down.stderr
        ledger.fault("cockpit")
        assert await watcher.wait_until(lambda s: s.any_exited, 15)
        await asyncio.sleep(0.3)
        snap = watcher.snapshot()
        assert snap.state.crash is None and snap.state.phase == "stopped", (snap.state.phase, snap.state.crash)
        assert snap.lifecycle == "stopped"
        ledger.survive("cockpit")
    finally:
        await watcher.close()
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
        env.cockpit("down", "stub", "--timeout", "1")
