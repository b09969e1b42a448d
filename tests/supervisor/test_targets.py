"""The Supervisor composes a target: the profile's hosts or a Slurm job, chosen from the profile,
seen in the snapshot as a typed `target` and in `status --json` as `target` (and `slurm`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cockpit.commands._support import render_status, status_json
from cockpit.core.profile import load_profile
from cockpit.core.state import RunState
from cockpit.supervisor.api import HostsView, RunSnapshot, SlurmView
from cockpit.supervisor.supervisor import Supervisor
from cockpit.supervisor.targets.hosts import HostsTarget
from cockpit.supervisor.targets.slurm import SlurmJobTarget
from tests.supervisor.test_supervisor import _profile

# the `slurm` object of `status --json` as docs/OPERATIONS.md ("Slurm") lists it
SLURM_KEYS = {"job_id", "state", "reason", "nodes", "node_list", "time_left", "time_limit", "exit_code", "words",
              "login", "telemetry", "checked_at"}


async def test_a_hosts_run_is_seen_as_its_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real simulated server launched on this machine: the snapshot's target is the hosts view,
    `status --json` carries it as `target` and has no `slurm` object."""
    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    monkeypatch.setenv("COCKPIT_RUNS_ROOT", str(tmp_path / "runs"))
    monkeypatch.setenv("COCKPIT_SIM_GPU_DIR", str(sim_dir))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    sup = Supervisor(load_profile(_profile(tmp_path, sim_dir)))
    assert isinstance(sup.target, HostsTarget) and sup.nodes is sup.target.nodes
    try:
        info = await sup.launch()
        assert info.pid is not None and sup.target.end_watch() is None
        snap = await sup.refresh_once()
        assert snap.target == HostsView(hosts=("local",))
        out = json.loads(json.dumps(status_json(snap)))
        assert out["target"] == {"kind": "hosts", "hosts": ["local"]} and "slurm" not in out
        res = await sup.stop(timeout=5)
        assert res.stopped
    finally:
        await sup.stop(timeout=3)
        await sup.close()


def _slurm_profile(tmp_path: Path) -> Path:
    p = tmp_path / "sl.yaml"
    p.write_text('name: sl\nversion: 0.5.9\ntarget: {kind: slurm, login: login1, nodes: 2, time: "10:00"}\n'
                 f"workdir: {tmp_path}\nserver:\n  model-path: /models/m\n  tp: 8\n")
    return p


def test_a_slurm_profile_gets_the_slurm_target_with_a_node_per_job_node(tmp_path: Path) -> None:
    sup = Supervisor(load_profile(_slurm_profile(tmp_path)))
    assert type(sup) is Supervisor and isinstance(sup.target, SlurmJobTarget)
    assert [n.label for n in sup.nodes] == ["node0", "node1"] and sup.target.end_watch() is not None
    # nothing submitted yet: the target has nothing to say, and neither does `status --json`
    snap = sup.snapshot()
    assert snap.target is None
    out = status_json(snap)
    assert "target" not in out and "slurm" not in out


def test_a_slurm_view_keeps_the_slurm_object_of_status_json() -> None:
    view = SlurmView(job_id="4242", login="login1", state="RUNNING", nodes=("gpu01", "gpu02"), node_list="gpu[01-02]",
                     time_left="3:59:12", words="Slurm: job 4242 state RUNNING", telemetry=None, checked_at=1.0)
    snap = RunSnapshot(taken_at=time.time(), profile="kimi", lifecycle="running", state=RunState(backend="sglang"),
                       findings=(), target=view)
    out = json.loads(json.dumps(status_json(snap)))
    assert set(out["slurm"]) == SLURM_KEYS
    assert out["slurm"]["nodes"] == ["gpu01", "gpu02"] and out["slurm"]["reason"] is None
    assert out["target"] == {**out["slurm"], "kind": "slurm"}
    assert "Slurm job 4242 · Slurm: job 4242 state RUNNING · 3:59:12 left" in render_status(snap)
