"""The profile picker: profiles from ./profiles and the config dir, the resolved command line and
the preflight findings (with the per-rank HiCache arithmetic) before anything launches."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cockpit.ui.app import CockpitApp
from cockpit.ui.screens.picker import PickerScreen

HICACHE_300 = """\
name: local-hicache300
hosts: [{ssh: local}]
version: 0.5.9
python: /opt/sglang/.venv/bin/python
server:
  model-path: /models/Kimi-K2.5
  tp: 8
  mem-fraction-static: 0.88
  enable-hierarchical-cache: true
  hicache-size: 300
  port: 30000
"""

BROKEN = "name: broken\nhosts: [{ssh: local}]\nserverr: {}\n"


@pytest.fixture
def profiles_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var, sub in (("HOME", "home"), ("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"), ("XDG_CACHE_HOME", "cache")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    d = tmp_path / "work" / "profiles"
    d.mkdir(parents=True)
    (d / "local-hicache300.yaml").write_text(HICACHE_300)
    (d / "broken.yaml").write_text(BROKEN)
    monkeypatch.chdir(tmp_path / "work")
    return d


async def _wait_preview(pilot, screen: PickerScreen, stem: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(200):
        await pilot.pause(0.05)
        if screen.preview is not None and screen.preview.path.stem == stem:
            return
    raise AssertionError(f"no preview for {stem}")


async def test_picker_shows_command_line_and_hicache_arithmetic(profiles_here: Path) -> None:
    app = CockpitApp(supervisor_factory=None)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PickerScreen)
        stems = [p.stem for p in screen.paths]
        assert "local-hicache300" in stems and "broken" in stems
        assert "demo" in stems or len(stems) >= 3  # the bundled examples are listed too
        ol = screen.query_one("#picker-list")
        ol.highlighted = stems.index("local-hicache300")  # type: ignore[attr-defined]
        await _wait_preview(pilot, screen, "local-hicache300")
        pv = screen.preview
        assert pv is not None and pv.argv is not None
        assert "--hicache-size" in pv.argv and "300" in pv.argv
        text = str(screen.query_one("#preview-text").render())
        assert "--mem-fraction-static 0.88" in text
        hicache = [f for f in pv.findings if "hicache" in f.id]
        assert hicache and hicache[0].severity == "critical"
        assert "8 × 300" in text or "8×300" in text or "2400" in text.replace(",", "")
        # a broken profile says which key is wrong, and does not open
        ol.highlighted = stems.index("broken")  # type: ignore[attr-defined]
        await _wait_preview(pilot, screen, "broken")
        assert "serverr" in str(screen.query_one("#preview-text").render())
        await pilot.press("enter")
        assert isinstance(app.screen, PickerScreen)
        await pilot.press("q")
    assert app.return_code == 0


async def test_picker_measures_remote_hosts_over_ssh(ssh_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The story's mistake on a host reached by SSH (a real sshd on loopback, alias gpu-box-1):
    refused in the picker with the per-rank arithmetic, measured before anything launches."""
    import sys

    import yaml

    from cockpit.locations import bundled_dir

    monkeypatch.chdir(tmp_path)
    # The bundled story profile, with a python that exists on this "GPU host" (the agent runs on it).
    data = yaml.safe_load((bundled_dir("profiles") / "kimi-k2.5-tp8-hicache300.yaml").read_text())
    data["python"] = sys.executable
    path = tmp_path / "kimi-k2.5-tp8-hicache300-here.yaml"
    path.write_text(yaml.safe_dump(data))
    app = CockpitApp(supervisor_factory=None, extra_profiles=[path])
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PickerScreen)
        screen.query_one("#picker-list").highlighted = screen.paths.index(path)  # type: ignore[attr-defined]
        for _ in range(1200):  # up to the picker's own 45 s measurement bound (MEASURE_TIMEOUT_S)
            await pilot.pause(0.05)
            pv = screen.preview
            if pv is not None and pv.path == path and not pv.measured.startswith("measuring"):
                break
        pv = screen.preview
        assert pv is not None and pv.measured == "facts measured on the hosts", pv.measured if pv else None
        hicache = [f for f in pv.findings if f.id == "hicache_host_memory"]
        assert hicache and hicache[0].severity == "critical", [(f.id, f.message) for f in pv.findings]
        text = str(screen.query_one("#preview-text").render())
        assert "8 ranks × 300 GB" in text and "gpu-box-1" in text


async def test_picker_shows_the_memory_plan_before_launch(profiles_here: Path, tmp_path: Path) -> None:
    """The story at 0.93: the picker's preflight carries the memory plan, critical, with the change."""
    from cockpit.sim.gpus import write_devices
    from cockpit.sim.presets import GPUS
    from tests.data.models import synth

    model = tmp_path / "Kimi-K2.5"
    synth.write_checkpoint(model, synth.load_config("kimi-k2.5"), shards=64, index=True)
    sim = tmp_path / "gpus"
    sim.mkdir()
    write_devices(sim, GPUS["rtx-pro-6000"], 8)
    (profiles_here / "kimi-plan.yaml").write_text(
        "name: kimi-plan\nhosts: [{ssh: local}]\nversion: 0.5.9\n"
        f"env: {{COCKPIT_SIM_GPU_DIR: '{sim}'}}\n"
        f"server:\n  model-path: {model}\n  tp: 8\n  mem-fraction-static: 0.93\n  chunked-prefill-size: 8192\n"
    )
    app = CockpitApp(supervisor_factory=None)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PickerScreen)
        stems = [p.stem for p in screen.paths]
        screen.query_one("#picker-list").highlighted = stems.index("kimi-plan")  # type: ignore[attr-defined]
        await _wait_preview(pilot, screen, "kimi-plan")
        for _ in range(300):
            await pilot.pause(0.05)
            pv = screen.preview
            if pv is not None and any(f.id == "memory_plan" for f in pv.findings):
                break
        pv = screen.preview
        assert pv is not None
        plan = next(f for f in pv.findings if f.id == "memory_plan")
        assert plan.severity == "critical" and plan.message.startswith("0.93 predicted to leave")
        text = str(screen.query_one("#preview-text").render())
        # the story's 0.87–0.89 (0.87 here: the profile leaves the graph batch at SGLang's default for the card)
        assert "0.93 predicted to leave" in text and re.search(r"--mem-fraction-static 0\.93 → 0\.8[789]\b", text), text
        await pilot.press("q")


async def test_picker_shows_each_profiles_last_outcome(profiles_here: Path) -> None:
    """UX (issue 17): the picker shows each profile's last outcome (READY / crashed kind / never)."""
    from cockpit.core.state import Crash, RunState
    from cockpit.journal import Journal
    from cockpit.supervisor.api import RunInfo
    from tests.ui.screen_text import screen_text

    (profiles_here / "never.yaml").write_text("name: never\nhosts: [{ssh: local}]\nserver: {model-path: /m, tp: 1}\n")
    j = Journal.open()
    try:
        run = RunInfo(id="20261129-115402-a", profile="local-hicache300", hosts=("local",), pid=1, pgid=1,
                      started_at="2026-11-29T11:54:02Z", run_dir="/r", log_path="/l")
        j.record_start(run, "local-hicache300", {})
        state = RunState(phase="crashed")
        state.crash = Crash(kind="cuda_oom", phase="prefill", rank="TP3", line=9, message="CUDA out of memory")
        j.record_end(run.id, "crashed", state, [])
    finally:
        j.close()
    app = CockpitApp(supervisor_factory=None)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        for _ in range(200):
            await pilot.pause(0.05)
            if screen.outcomes:  # type: ignore[attr-defined]
                break
        await pilot.pause()
        text = screen_text(app)
        assert "local-hicache300  crashed: cuda_oom" in text
        assert "never  never run" in text
