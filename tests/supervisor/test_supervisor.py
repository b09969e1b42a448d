"""The Supervisor API against the local simulator: batching, crash detection, restart and leftovers."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cockpit.backends import get_backend
from cockpit.core.findings import FlagChange
from cockpit.core.profile import load_profile
from cockpit.supervisor.api import LogBatch, RunSnapshot
from cockpit.supervisor.nodes import node_log
from cockpit.supervisor.supervisor import (
    LeftoversHoldGpus,
    RunRefused,
    Supervisor,
)
from tests.conftest import free_port

rank_gpu_map = get_backend("sglang").launch.rank_gpus

PY = sys.executable


def _profile(tmp_path: Path, sim_dir: Path, *, traffic: str = "steady", speed: str = "200") -> Path:
    port = free_port()
    program = [PY, "-m", "cockpit", "sim", "--sim-gpu", "rtx-pro-6000", "--sim-speed", speed,
               "--sim-traffic", traffic, "--sim-dir", str(sim_dir)]
    p = tmp_path / "sup.yaml"
    p.write_text(
        "name: suptest\n"
        "version: 0.5.9\n"
        "hosts: [{ssh: local}]\n"
        f"program: {program!r}\n".replace("'", '"')
        + f"workdir: {tmp_path / 'work'}\n"
        "log: logs/sglang.log\n"
        f"env: {{COCKPIT_SIM_GPU_DIR: '{sim_dir}'}}\n"
        "server:\n"
        "  model-path: /models/Kimi-K2.5\n"
        "  trust-remote-code: true\n"
        "  tp: 8\n"
        "  mem-fraction-static: 0.88\n"
        f"  port: {port}\n"
    )
    return p


@pytest.fixture
async def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Path]:
    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    monkeypatch.setenv("COCKPIT_RUNS_ROOT", str(tmp_path / "runs"))
    monkeypatch.setenv("COCKPIT_SIM_GPU_DIR", str(sim_dir))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    path = _profile(tmp_path, sim_dir)
    yield path
    sup = Supervisor(load_profile(path))
    await sup.stop(timeout=3, kill_leftovers=False)
    await sup.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_batches_rates_crash_detection_and_reattach(env: Path) -> None:
    snaps: list[tuple[float, RunSnapshot]] = []
    batches: list[tuple[float, LogBatch]] = []
    sup = Supervisor(load_profile(env), on_snapshot=lambda s: snaps.append((time.monotonic(), s)),
                     on_logs=lambda b: batches.append((time.monotonic(), b)))
    info = await sup.launch()
    with pytest.raises(RunRefused):
        await sup.launch(attach=False)
    runner = asyncio.create_task(sup.run())
    assert await sup.wait_until(lambda s: s.is_ready(), 60), sup.snapshot().state.phase
    await asyncio.sleep(2.0)  # steady traffic: batch lines keep coming

    # ≤ 10 snapshots a second, log batches at 10-20 Hz, never one callback per line
    t_end = snaps[-1][0]
    recent = [t for t, _ in snaps if t > t_end - 1.5]
    assert len(recent) <= 17
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(snaps)]
    assert min(gaps) >= 0.09
    lines = sum(len(b.lines) for _, b in batches)
    assert lines > len(batches)
    bgaps = [b - a for (a, _), (b, _) in itertools.pairwise(batches)]
    assert min(bgaps) >= 0.045
    # every line of the run arrives once, in order, numbered from 1 — but Cockpit's own requests'
    # access lines (marked `?by=cockpit`), which the log reader leaves out (core/ownlines.py)
    numbers = [ln.number for _, b in batches for ln in b.lines]
    assert numbers[0] == 1 and numbers == sorted(set(numbers))
    missing = sorted(set(range(1, numbers[-1] + 1)) - set(numbers))
    own = Path(info.log_path).read_text(errors="replace").count("by=cockpit")
    assert len(missing) <= own, (missing[:5], own)
    snap = sup.snapshot()
    assert snap.run is not None and snap.run.id == info.id
    assert len(snap.state.ranks) == 8
    assert snap.rank_gpu["TP3"] == ("local", 3)
    assert any(g.used_gb for g in snap.gpus)

    # a second cockpit attaches to the same run instead of launching
    other = Supervisor(load_profile(env))
    assert (await other.launch()).id == info.id
    await other.close()

    # the server dies without a word: crashed within a second
    assert info.pgid is not None
    killed_at = time.monotonic()
    os.killpg(info.pgid, signal.SIGKILL)
    assert await sup.wait_until(lambda s: s.state_phase == "crashed", 5)
    assert time.monotonic() - killed_at < 1.0
    assert sup.snapshot().state.crash is not None
    await sup.close()
    await runner


async def test_restart_waits_for_leftovers_and_never_launches_on_top(env: Path, tmp_path: Path) -> None:
    seen: list[tuple[str, str | None]] = []
    sup = Supervisor(load_profile(env), on_snapshot=lambda s: seen.append((s.lifecycle, s.run.id if s.run else None)))
    first = await sup.launch()
    runner = asyncio.create_task(sup.run())
    assert await sup.wait_until(lambda s: s.is_ready(), 60)
    publishing = sup._publishing
    sim_dir = tmp_path / "gpus"
    # an orphan that holds memory on GPU 3 (outside the run's session: a stop won't reach it)
    holder = subprocess.Popen(
        [PY, "-c",
         "import sys, time\nfrom pathlib import Path\nfrom cockpit.sim.gpus import ProcFile\n"
         "ProcFile(Path(sys.argv[1]), 3).set(7.5)\nprint('held', flush=True)\ntime.sleep(600)\n",
         str(sim_dir)],
        stdout=subprocess.PIPE, start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        change = [FlagChange("--mem-fraction-static", 0.88, 0.85)]
        with pytest.raises(LeftoversHoldGpus) as exc:
            await sup.restart(change, timeout=5)
        assert [p.pid for p in exc.value.leftovers] == [holder.pid]
        # the old run is gone and nothing new was launched on top of the held memory
        assert first.pid is not None and not _alive(first.pid)
        assert await Supervisor(load_profile(env)).attach() is None
        # the operator agrees: kill the leftover, then launch with the change
        before = len(seen)
        second = await sup.restart(change, timeout=5, kill_leftovers=True)
        assert second.id != first.id
        # one publisher through the restarts: the screens saw the stop, the GPU wait and the
        # launch as snapshots (the dashboard no longer polls)
        assert sup._publishing is publishing and publishing is not None and not publishing.done()
        assert await sup.wait_until(lambda s: (("running", second.id) in seen[before:]), 10)
        lifecycles = {lc for lc, _ in seen[before:]}
        assert lifecycles & {"stopping", "waiting_gpu_release", "launching"}, lifecycles  # ≤ 10 Hz: some of them
        holder.wait(10)
        assert sup.snapshot().flag_diff and sup.snapshot().flag_diff[0].to_value == 0.85
        assert second.flags["mem-fraction-static"] == 0.85
        assert await sup.wait_until(lambda s: s.is_ready(), 60)
        res = await sup.stop(timeout=5)
        assert res.stopped and res.leftovers == []
        assert sup.snapshot().state.phase == "stopped"
    finally:
        if holder.poll() is None:
            holder.kill()
        await sup.close()
        await runner


def test_rank_gpu_mapping() -> None:
    ranks = ["TP0", "TP3", "TP11", "DP1 TP3"]
    assert rank_gpu_map(ranks, ["a"], {"tp": 4}, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"})["TP3"] == ("a", 7)
    assert rank_gpu_map(ranks, ["a"], {"tp-size": 4, "base-gpu-id": 2}, {})["TP3"] == ("a", 5)
    two = rank_gpu_map(ranks, ["a", "b"], {"tp": 16}, {})
    assert two["TP11"] == ("b", 3) and two["TP3"] == ("a", 3)
    assert "TP3" not in rank_gpu_map(["TP3"], ["a"], {"tp": 4}, {"CUDA_VISIBLE_DEVICES": "0,1"})


def test_node_log_names() -> None:
    from cockpit.core.profile import parse_profile

    p = parse_profile({"name": "x", "log": "logs/sglang.log"})
    assert node_log(p, 0) == "logs/sglang.log"
    assert node_log(p, 1) == "logs/sglang.node1.log"
    p = parse_profile({"name": "x", "log": "server"})
    assert node_log(p, 2) == "server.node2"


async def test_a_huge_log_is_read_as_head_and_tail_with_exact_line_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cockpit.supervisor.follower as supmod

    # thresholds scaled down so a few MB stand for many GB
    monkeypatch.setattr(supmod, "BIG_LOG_BYTES", 1 << 20)
    monkeypatch.setattr(supmod, "BIG_LOG_HEAD_BYTES", 256 << 10)
    monkeypatch.setattr(supmod, "BIG_LOG_TAIL_LINES", 500)
    monkeypatch.setenv("COCKPIT_RUNS_ROOT", str(tmp_path / "runs"))
    golden = Path(__file__).resolve().parent.parent / "data" / "sglang-0.5.9-kimi-0.88-healthy.log"
    log = tmp_path / "work" / "big.log"
    log.parent.mkdir()
    log.write_bytes(b"an older run's line\n" * 1000)  # the log earlier runs appended to: kept aside
    writer = (
        "import sys, time\n"
        "sys.stdout.write(open(sys.argv[1]).read())\n"
        "line = '[2026-02-24 12:00:00 TP0] Decode batch, #running-req: 3, #token: 900, token usage: 0.01, "
        "cuda graph: True, gen throughput (token/s): 123.45, #queue-req: 0\\n'\n"
        "sys.stdout.write(line * 40000)\n"
        "sys.stdout.write('the last line\\n')\n"
        "sys.stdout.flush()\n"
        "time.sleep(600)\n"
    )
    script = tmp_path / "writer.py"
    script.write_text(writer)
    p = tmp_path / "big.yaml"
    p.write_text(
        "name: bigtest\nhosts: [{ssh: local}]\n"
        f"program: {json.dumps([PY, str(script), str(golden)])}\n"
        f"workdir: {tmp_path / 'work'}\nlog: big.log\n"
        "server: {model-path: moonshotai/Kimi-K2.5, tp: 8}\n"
    )
    sup = Supervisor(load_profile(p))
    try:
        info = await sup.launch()
        assert (log.parent / f"big.before-{info.id}.log").read_bytes() == b"an older run's line\n" * 1000
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not log.read_bytes().endswith(b"the last line\n"):
            await asyncio.sleep(0.1)
        # well past BIG_LOG_BYTES (the writer may have finished before start() returned: no growth
        # to compare against, only the whole)
        assert log.stat().st_size > 4 << 20
        snap = await sup.refresh_once()
        st = snap.state
        assert len(st.ranks) == 8 and st.min_headroom_gb is not None  # the startup came from the head
        run_lines = log.read_bytes().split(b"\n")[:-1]  # the run's own file (the link's target)
        assert os.readlink(log) == f"big.{info.id}.log"
        assert sup.nodes[0].log.parser.lines_seen == len(run_lines)  # line numbers are the file's
        assert st.lines_seen == len(run_lines) - 1  # the last decode line, numbered as in the file
        last = sup.recent_lines()
        assert last[-1].text == "the last line" and last[-1].number == len(run_lines)
        assert len(last) <= 5000
        assert "counted, not parsed" in snap.progress
    finally:
        await sup.stop(timeout=3)
        await sup.close()


async def test_two_cockpits_racing_on_one_profile_launch_once(env: Path) -> None:
    a, b = Supervisor(load_profile(env)), Supervisor(load_profile(env))
    ra, rb = await asyncio.gather(a.launch(), b.launch())
    assert ra.id == rb.id and ra.pid == rb.pid
    assert ra.pid is not None and _alive(ra.pid)
    runs_dir = Path(os.environ["COCKPIT_RUNS_ROOT"]) / "suptest"
    assert len([d for d in runs_dir.iterdir() if d.is_dir()]) == 1
    await a.close()
    await b.close()


async def test_the_memory_plan_beside_what_the_run_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once capture is over, the advice puts the plan's prediction for the run's own value beside
    the log's figures (the story's model, read from a checkpoint written by tests/data/models/synth.py)."""
    from tests.data.models import synth

    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    monkeypatch.setenv("COCKPIT_RUNS_ROOT", str(tmp_path / "runs"))
    monkeypatch.setenv("COCKPIT_SIM_GPU_DIR", str(sim_dir))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    model = tmp_path / "Kimi-K2.5"
    synth.write_checkpoint(model, synth.load_config("kimi-k2.5"), shards=64, index=True)
    path = _profile(tmp_path, sim_dir)
    path.write_text(path.read_text().replace("/models/Kimi-K2.5", str(model)))
    sup = Supervisor(load_profile(path))
    try:
        await sup.launch()
        runner = asyncio.create_task(sup.run())
        assert await sup.wait_until(lambda s: s.is_ready(), 60), sup.snapshot().state.phase
        assert await sup.wait_until(lambda s: any(f.id == "memory_plan_vs_run" for f in s.snapshot().findings), 30)
        f = next(f for f in sup.snapshot().findings if f.id == "memory_plan_vs_run")
        st = sup.snapshot().state
        assert f.severity == "info" and "--mem-fraction-static 0.88" in f.message
        assert f"the log shows {st.max_total_num_tokens:,}" in f.message and "calibrates from this run" in f.message
        runner.cancel()
    finally:
        await sup.stop(timeout=3, kill_leftovers=False)
        await sup.close()
