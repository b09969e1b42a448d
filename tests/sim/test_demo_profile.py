"""profiles/demo.yaml runs the story on the simulator; the 5-minute soak is opt-in (-m soak)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from cockpit.backends.sglang.command import build_argv
from cockpit.backends.sglang.logparse import read_log
from cockpit.core.profile import load_profile
from cockpit.sim.sglang.config import load_config

from .conftest import KIMI

DEMO = Path(__file__).resolve().parents[2] / "profiles" / "demo.yaml"


def test_demo_profile_is_the_story() -> None:
    profile = load_profile(str(DEMO))
    assert profile.name == "demo" and profile.hosts[0].is_local and profile.version == "0.5.9"
    argv = build_argv(profile)
    assert argv[:2] == ["cockpit", "sim"]
    cfg = load_config(argv[2:])
    assert (cfg.tp, cfg.mfs, cfg.port, cfg.enable_metrics) == (8, 0.93, 30123, True)
    assert (cfg.gpu.key, cfg.model.key, cfg.opts.traffic) == ("rtx-pro-6000", "kimi-k2.5", "steady")
    # ~125 simulated seconds of start-up land in the 15-25 s window; the first long document
    # (240 simulated seconds after readiness) in the 30-60 s window
    assert 15 <= 125 / cfg.speed <= 25 and 30 <= 240 / cfg.speed <= 60
    # `cockpit demo --sim-speed X` appends an override: the last value wins
    assert load_config([*argv[2:], "--sim-speed", "50"]).speed == 50


@pytest.mark.soak
@pytest.mark.timeout(420)
def test_soak_088_five_minutes_at_demo_speed(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.88", "--sim-traffic", "steady", "--enable-metrics"], speed=6)
    run.wait_for("The server is fired up and ready to roll!", timeout=60)
    time.sleep(300)
    assert run.proc.poll() is None
    state = read_log(run.log_path)
    assert state.crash is None and state.phase == "ready"
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait_exit(10) == 0
    assert run.proc_files() == []
