"""Snapshot tests of the dashboard at 80×24 and 160×48 on the Kimi story (frozen clock and ages)."""

from __future__ import annotations

from typing import Any

from cockpit.core.profile import parse_profile
from cockpit.ui.app import CockpitApp
from cockpit.ui.screens.dashboard import DashboardScreen
from tests.ui.story import T0, story_log_lines, story_snapshot, two_node_snapshot

PROFILE = parse_profile(
    {
        "name": "demo",
        "hosts": [{"ssh": "local"}],
        "server": {"model-path": "/models/Kimi-K2.5", "tp": 8, "mem-fraction-static": 0.93},
    },
    "demo.yaml",
)


def make_app(theme: str = "dark") -> CockpitApp:
    return CockpitApp(profile=PROFILE, theme=theme, supervisor_factory=None, clock=lambda: T0)


def feed(snapshot: Any, logs: bool = True):  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        screen = pilot.app.screen
        assert isinstance(screen, DashboardScreen)
        if logs:
            screen.query_one("#log").add_lines(story_log_lines())
        screen.apply_snapshot(snapshot)
        await pilot.pause()

    return run_before


def test_ready_low_headroom_160x48(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), terminal_size=(160, 48), run_before=feed(story_snapshot(0.93, "ready")))


def test_ready_low_headroom_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=feed(story_snapshot(0.93, "ready")))


def test_restarted_at_088_160x48(snap_compare) -> None:  # type: ignore[no-untyped-def]
    snap = story_snapshot(0.88, "ready", restarted=True)
    assert snap_compare(make_app(), terminal_size=(160, 48), run_before=feed(snap))


def test_crash_modal_160x48(snap_compare) -> None:  # type: ignore[no-untyped-def]
    snap = story_snapshot(0.93, "ready", crashed=True)
    assert snap_compare(make_app(), terminal_size=(160, 48), run_before=feed(snap))


def test_loading_light_theme_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app("light"), terminal_size=(80, 24), run_before=feed(story_snapshot(0.93, "loading"), logs=False))


def test_too_small_59x15(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), terminal_size=(59, 15), run_before=feed(story_snapshot(0.93, "ready")))


def test_two_nodes_16_ranks_160x48(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), terminal_size=(160, 48), run_before=feed(two_node_snapshot()))


def test_two_nodes_16_ranks_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=feed(two_node_snapshot()))


def test_crash_modal_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    snap = story_snapshot(0.93, "ready", crashed=True)
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=feed(snap))
