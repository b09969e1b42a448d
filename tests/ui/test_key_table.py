"""Defect 10: help, README and docs/TUI.md disagreed about the keys. One table (DASHBOARD_KEYS)
covers every dashboard binding exactly once; both documents carry it as generated; help shows it."""

from __future__ import annotations

from pathlib import Path

from textual.binding import Binding

from cockpit.ui.keys import APP_BINDINGS, DASHBOARD_BINDINGS, DASHBOARD_KEYS, help_rows, markdown_table
from cockpit.ui.screens.dialogs import HelpScreen
from cockpit.ui.widgets.logpane import LogPane
from tests.ui.screen_text import screen_text
from tests.ui.story import story_snapshot
from tests.ui.test_dashboard_snapshots import make_app

ROOT = Path(__file__).resolve().parents[2]
DISPLAY = {"question_mark": "?", "slash": "/", "escape": "esc", "pageup": "PgUp", "pagedown": "PgDn", "home": "Home",
           "end": "End", "up": "↑", "down": "↓", "f1": "F1", "tab": "tab", "ctrl+p": "ctrl+p", "ampersand": "&",
           "left": "←", "right": "→", "enter": "enter"}


def _bindings() -> list[Binding]:
    return [b for b in (*DASHBOARD_BINDINGS, *APP_BINDINGS, *LogPane.BINDINGS) if isinstance(b, Binding)]


def test_every_binding_is_in_the_table_once_with_its_key() -> None:
    ids = [i for _k, _d, row_ids in DASHBOARD_KEYS for i in row_ids]
    assert len(ids) == len(set(ids)), "an id in two rows"
    bindings = {b.id: b for b in _bindings()}
    assert set(ids) == set(bindings), (set(bindings) - set(ids), set(ids) - set(bindings))
    for keys, does, row_ids in DASHBOARD_KEYS:
        for i in row_ids:
            key = bindings[i].key
            if key.isdigit() and "`1`–`8`" in keys:
                continue  # a range names its digits
            shown = DISPLAY.get(key, key)
            assert shown in keys + " " + does, (i, key, keys)


def _block(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    start = text.index("<!-- keys:")
    start = text.index("\n", start) + 1
    return text[start : text.index("<!-- /keys -->", start)]


def test_readme_and_tui_doc_carry_the_generated_table() -> None:
    table = markdown_table()
    assert _block(ROOT / "README.md") == table
    assert _block(ROOT / "docs" / "TUI.md") == table


async def test_help_lists_the_table_without_internal_ids_and_scrolls_at_80x24() -> None:
    """Defect 7: at 80×24 help was cut after `c Crash` and did not scroll."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        screen.apply_snapshot(story_snapshot(0.93, "ready"))
        await pilot.pause()
        await pilot.press("question_mark")
        for _ in range(3):
            await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert app.screen.rows == help_rows()
        first = screen_text(app)
        assert "dash." not in first and "app." not in first
        await pilot.press("end")
        for _ in range(3):
            await pilot.pause()
        last = screen_text(app)
        assert "command palette: every action by name" in last  # the last row, reached
