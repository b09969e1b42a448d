"""The long reliability runs, opt-in: `pytest -m soak tests/reliability` (COCKPIT_SOAK_KILLS sets the
number of killed connections, default 200). The same faults as the fast suite, many more times."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from pathlib import Path

import pytest

from cockpit.core.profile import parse_profile
from cockpit.supervisor.api import LogBatch
from cockpit.supervisor.supervisor import Supervisor
from tests.reliability.helpers import PY, split_lines, writer_script
from tests.reliability.test_ssh_faults import _kill_at_random

pytestmark = pytest.mark.soak
KILLS = int(os.environ.get("COCKPIT_SOAK_KILLS", "200"))


@pytest.mark.timeout(3600)
async def test_soak_supervisor_follow_under_killed_connections_and_sshd_restarts(ssh_env, tmp_path: Path, ledger) -> None:
    stop = tmp_path / "stop-writer"
    profile = parse_profile(
        {"name": "soak", "hosts": [{"ssh": "gpu-box-1"}], "program": [PY, str(writer_script(tmp_path)), str(stop), "0.002"],
         "workdir": str(tmp_path / "work"), "log": "logs/soak.log"}, "soak.yaml")
    launcher = Supervisor(profile, runs_root=str(tmp_path / "runs"))
    info = await launcher.launch(attach=False)
    await launcher.close()
    got: list[str] = []
    sup = Supervisor(profile, runs_root=str(tmp_path / "runs"),
                     on_logs=lambda b: got.extend(ln.text for ln in b.lines) if isinstance(b, LogBatch) else None)
    await sup.attach()
    runner = asyncio.create_task(sup.run())
    rnd = random.Random(20)
    try:
        await asyncio.sleep(0.8)
        done = 0
        while done < KILLS:
            batch = min(25, KILLS - done)
            hit = await asyncio.to_thread(_kill_at_random, ssh_env, ledger, "ssh", batch, rnd.randrange(10**6),
                                          lambda: len(got), 600.0)
            assert hit == batch
            done += hit
            await asyncio.to_thread(ssh_env.restart)  # and now and then the whole sshd
            ledger.fault("ssh")
        await asyncio.sleep(0.5)
        stop.touch()
        assert await sup.wait_until(lambda s: s.any_exited, 60)
        await asyncio.sleep(0.3)
    finally:
        stop.touch()
        await sup.close()
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
    expected = [ln.decode()[:4000] for ln in split_lines(Path(info.log_path).read_bytes())]
    assert ledger.lines(expected, got) == (0, 0)
    ledger.survive("ssh", KILLS + KILLS // 25)


@pytest.mark.timeout(3600)
async def test_soak_kill_the_server_at_random_moments(tmp_path: Path, ledger) -> None:
    from tests.reliability.test_server_faults import _members, _profile

    rnd = random.Random(7)
    for i in range(int(os.environ.get("COCKPIT_SOAK_RUNS", "20"))):
        root = tmp_path / f"r{i}"
        root.mkdir()
        marks: dict[str, float] = {}
        delay = rnd.uniform(0.3, 8.0)

        def on_snapshot(snap, delay=delay, marks=marks) -> None:
            if "start" not in marks and snap.run is not None:
                marks["start"] = time.monotonic()
            if "kill" not in marks and "start" in marks and time.monotonic() - marks["start"] > delay:
                for pid in _members(snap.run.run_dir):
                    os.kill(pid, 9)
                marks["kill"] = time.monotonic()
            elif "kill" in marks and "seen" not in marks and snap.state.phase == "crashed":
                marks["seen"] = time.monotonic()

        sup = Supervisor(_profile(f"soak{i}", root), runs_root=str(root / "runs"), on_snapshot=on_snapshot)
        await sup.launch(attach=False)
        runner = asyncio.create_task(sup.run())
        try:
            def seen(_s: Supervisor, m: dict[str, float] = marks) -> bool:
                return "seen" in m

            assert await sup.wait_until(seen, 60)
        finally:
            await sup.close()
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
        ledger.fault("server")
        assert marks["seen"] - marks["kill"] <= 1.0
        ledger.survive("server")
