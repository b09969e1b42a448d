"""`cockpit demo [--backend NAME]`: the TUI on the engine's bundled demo profile (its
`EngineWords.demo_profile`: the Kimi-K2.5 story on one simulator, the Qwen3-32B memory-setting
story on the other) — launched (or attached to when it is already running)."""

from __future__ import annotations

import argparse

from cockpit.commands._theme import resolve_theme
from cockpit.face import (
    DEFAULT_BACKEND,
    BadInput,
    Profile,
    bundled_dir,
    engine_name,
    engine_words,
    load_profile,
)
from cockpit.ui.app import CockpitApp


def demo_profile(sim_speed: float | None = None, backend: str | None = None, port: int | None = None,
                 sim_startup_speed: float | None = None) -> Profile:

    name = engine_words(backend or DEFAULT_BACKEND).demo_profile
    if name is None:
        raise BadInput(f"{engine_name(backend or DEFAULT_BACKEND)} has no demo profile")
    profile = load_profile(bundled_dir("profiles") / name)
    if sim_speed is not None:
        profile = with_sim_speed(profile, sim_speed)
    if sim_startup_speed is not None:
        profile = with_sim_speed(profile, sim_startup_speed, "--sim-startup-speed")
    if port is not None:
        profile = with_port(profile, port)
    return profile


def with_port(profile: Profile, port: int) -> Profile:
    """The same profile serving on `port` (tests and a second demo must not fight over 30123)."""
    if not 1 <= port <= 65535:
        raise BadInput(f"--port must be 1–65535, not {port}")
    new = profile.model_copy(update={"server": {**profile.server, "port": port}})
    new.source = profile.source
    return new


def with_sim_speed(profile: Profile, speed: float, option: str = "--sim-speed") -> Profile:
    """The same profile with the simulator's --sim-speed (or `option`: --sim-startup-speed, the
    speed until the server is ready) replaced (or added)."""
    if speed <= 0:
        raise BadInput(f"{option} must be positive, not {speed:g}")
    program = list(profile.program or ["cockpit", "sim"])
    value = f"{speed:g}"
    for i, item in enumerate(program):
        if item == option and i + 1 < len(program):
            program[i + 1] = value
            break
        if item.startswith(f"{option}="):
            program[i] = f"{option}={value}"
            break
    else:
        program += [option, value]
    new = profile.model_copy(update={"program": program})
    new.source = profile.source
    return new


def run(args: argparse.Namespace) -> int:

    theme = resolve_theme(getattr(args, "theme", None))
    profile = demo_profile(getattr(args, "sim_speed", None), getattr(args, "backend", None),
                           getattr(args, "port", None), getattr(args, "sim_startup_speed", None))


    app = CockpitApp(profile=profile, theme=theme)
    app.run()
    return int(app.return_code or 0)
