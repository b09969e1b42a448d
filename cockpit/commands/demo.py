"""`cockpit demo [--backend sglang|vllm]`: the TUI on a bundled demo profile — the Kimi-K2.5 story
on the SGLang simulator, or the Qwen3-32B --gpu-memory-utilization story on the vLLM one —
launched (or attached to when it is already running)."""

from __future__ import annotations

import argparse

from cockpit.face import Profile

DEMO_PROFILES = {"sglang": "demo.yaml", "vllm": "demo-vllm.yaml"}


def demo_profile(sim_speed: float | None = None, backend: str = "sglang", port: int | None = None) -> Profile:
    from cockpit.face import bundled_dir, load_profile

    profile = load_profile(bundled_dir("profiles") / DEMO_PROFILES[backend])
    if sim_speed is not None:
        profile = with_sim_speed(profile, sim_speed)
    if port is not None:
        profile = with_port(profile, port)
    return profile


def with_port(profile: Profile, port: int) -> Profile:
    """The same profile serving on `port` (tests and a second demo must not fight over 30123)."""
    if not 1 <= port <= 65535:
        from cockpit.face import BadInput

        raise BadInput(f"--port must be 1–65535, not {port}")
    new = profile.model_copy(update={"server": {**profile.server, "port": port}})
    new.source = profile.source
    return new


def with_sim_speed(profile: Profile, speed: float) -> Profile:
    """The same profile with the simulator's --sim-speed replaced (or added)."""
    if speed <= 0:
        from cockpit.face import BadInput

        raise BadInput(f"--sim-speed must be positive, not {speed:g}")
    program = list(profile.program or ["cockpit", "sim"])
    value = f"{speed:g}"
    for i, item in enumerate(program):
        if item == "--sim-speed" and i + 1 < len(program):
            program[i + 1] = value
            break
        if item.startswith("--sim-speed="):
            program[i] = f"--sim-speed={value}"
            break
    else:
        program += ["--sim-speed", value]
    new = profile.model_copy(update={"program": program})
    new.source = profile.source
    return new


def run(args: argparse.Namespace) -> int:
    from cockpit.commands.tui import resolve_theme

    theme = resolve_theme(getattr(args, "theme", None))
    profile = demo_profile(getattr(args, "sim_speed", None), getattr(args, "backend", None) or "sglang",
                           getattr(args, "port", None))

    from cockpit.ui.app import CockpitApp

    app = CockpitApp(profile=profile, theme=theme)
    app.run()
    return int(app.return_code or 0)
