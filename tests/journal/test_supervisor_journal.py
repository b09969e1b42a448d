"""Runs recorded by the real supervisor against the simulator, read back by `cockpit runs`.

The story's afternoon in miniature: the simulated Kimi-K2.5 on 8 x RTX PRO 6000 at
mem-fraction-static 0.93 (dies with cuda_oom on the first long prefill, ~0.8 GiB headroom) and
at 0.88 (ready, ~5.5 GiB). The simulator runs at a high --sim-speed so both take seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.core.profile import load_profile
from cockpit.journal import Journal

SIM_SPEED = "200"


def _profile(root: Path, port: int) -> Path:
    sim_dir = root / "gpus"
    sim_dir.mkdir(exist_ok=True)
    program = [sys.executable, "-m", "cockpit", "sim", "--sim-gpu", "rtx-pro-6000", "--sim-speed", SIM_SPEED,
               "--sim-traffic", "steady", "--sim-dir", str(sim_dir)]
    path = root / "kimi-sim.yaml"
    path.write_text(
        "name: kimi-sim\n"
        "version: 0.5.9\n"
        "hosts:\n  - ssh: local\n"
        f"program: {json.dumps(program)}\n"
        f"workdir: {root / 'work'}\n"
        "log: logs/sglang.log\n"
        f"env: {{COCKPIT_SIM_GPU_DIR: '{sim_dir}'}}\n"
        "server:\n"
        "  model-path: /models/Kimi-K2.5\n"
        "  trust-remote-code: true\n"
        "  tp: 8\n"
        "  mem-fraction-static: 0.93\n"
        f"  port: {port}\n"
    )
    return path


async def _one_run(profile_path: Path, runs_root: Path, journal: Journal, mfs: float, until: str) -> str:
    from cockpit.supervisor.supervisor import Supervisor

    sup = Supervisor(load_profile(profile_path), journal=journal, runs_root=str(runs_root))
    info = await sup.launch({"mem-fraction-static": mfs}, attach=False)
    runner = asyncio.create_task(sup.run())
    try:
        if until == "crashed":
            ok = await sup.wait_until(lambda s: s.state_phase == "crashed" and s.any_exited, 90)
        else:
            # ready, and serving long enough for decode lines (gen throughput) to arrive
            ok = await sup.wait_until(
                lambda s: s.state_phase == "ready" and len(s.snapshot().state.gen_throughput) >= 3, 90)
        assert ok, f"mfs {mfs}: never {until}; phase {sup.state_phase}"
        if until != "crashed":
            await sup.stop(timeout=5)
    finally:
        await sup.close()
        runner.cancel()
        try:
            await runner
        except (asyncio.CancelledError, Exception):
            pass
    return info.id


def _complete_unwatched_copy(journal: Journal, run_id: str) -> None:
    """The same crash as if no cockpit had watched it: started, then completed from its log alone."""
    from cockpit.backends.sglang.logparse import read_log
    from cockpit.supervisor.api import RunInfo

    rec = journal.get(run_id)
    assert rec is not None and rec.log_path
    state = read_log(rec.log_path)
    info = RunInfo(id="unwatched-" + run_id, profile=rec.profile, hosts=rec.hosts, pid=None, pgid=None,
                   started_at=rec.started_at, run_dir=rec.run_dir or "", log_path=rec.log_path)
    journal.record_start(info, rec.profile, rec.flags)
    journal.complete_from_state(info.id, state, [], "crashed")
    done = journal.get(info.id)
    assert done is not None
    assert (done.outcome, done.crash_kind, done.crash_phase) == ("crashed", "cuda_oom", "prefill")
    assert done.ended_at is not None and done.time_to_ready_s is not None
    assert done.min_headroom_gb == rec.min_headroom_gb
    assert done.max_total_num_tokens == rec.max_total_num_tokens
    assert journal.running_runs(rec.profile) == []


@pytest.mark.timeout(240)
def test_two_supervised_runs_land_in_the_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.conftest import free_port

    data = tmp_path / "xdg-data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    monkeypatch.setenv("COCKPIT_SIM_GPU_DIR", str(tmp_path / "gpus"))
    monkeypatch.setenv("COCKPIT_RUNS_ROOT", str(tmp_path / "runs"))
    profile = _profile(tmp_path, free_port())

    async def both() -> tuple[str, str]:
        journal = Journal.open()
        try:
            crashed = await _one_run(profile, tmp_path / "runs", journal, 0.93, "crashed")
            _complete_unwatched_copy(journal, crashed)
            ready = await _one_run(profile, tmp_path / "runs", journal, 0.88, "ready")
        finally:
            journal.close()
        return crashed, ready

    crashed_id, ready_id = asyncio.run(both())

    env = {**os.environ, "XDG_DATA_HOME": str(data)}
    out = subprocess.run([sys.executable, "-m", "cockpit", "runs", "--json"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    runs = {r["id"]: r for r in json.loads(out.stdout)}
    assert set(runs) == {crashed_id, ready_id, "unwatched-" + crashed_id}
    c, r = runs[crashed_id], runs[ready_id]
    assert (c["outcome"], c["crash_kind"]) == ("crashed", "cuda_oom"), c
    assert c["crash_phase"] == "prefill"
    assert r["outcome"] == "stopped" and r["crash_kind"] is None, r  # it was ready, then we stopped it
    assert r["time_to_ready_s"] is not None
    assert c["flags"]["mem-fraction-static"] == 0.93 and r["flags"]["mem-fraction-static"] == 0.88
    assert c["min_headroom_gb"] == pytest.approx(0.8, abs=0.25)
    assert r["min_headroom_gb"] == pytest.approx(5.5, abs=0.3)
    assert c["max_total_num_tokens"] > r["max_total_num_tokens"] > 0
    assert r["peak_gen_throughput"] is not None and r["peak_gen_throughput"] > 0
    assert c["decisive_lines"], c

    out = subprocess.run([sys.executable, "-m", "cockpit", "runs", "compare", crashed_id, ready_id],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert crashed_id in lines[0] and ready_id in lines[0]
    mfs = next(line for line in lines if line.startswith("--mem-fraction-static"))
    assert mfs.split()[1:] == ["0.93", "0.88"]
    assert "cuda_oom" in out.stdout
