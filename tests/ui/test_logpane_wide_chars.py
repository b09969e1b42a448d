"""Issue 40, finding 20: the log pane wraps by terminal cells, not characters.

A CJK character or most emoji take two cells. Counting characters, the pane gave a line of 30 CJK
characters (60 cells) at width 40 one row: its second half was cut off; a row boundary could fall
inside a wide character, which the crop then blanked. Now the rows come from the cells (Rich's
`cell_len` / per-character width): every painted row is at most the pane's width, and the rows of a
line, read in order, give back the whole line. In the no-wrap view, the sideways extent counts cells
too, so the end of a wide line can be scrolled to.
"""

from __future__ import annotations

from rich.cells import cell_len

from cockpit.supervisor.api import LogLine
from cockpit.ui.widgets.logpane import LogPane
from tests.ui.test_dashboard_snapshots import make_app

LINES = [
    "[2026-12-03 10:00:00 TP0] " + "模型加载完成，显存占用正常，开始预热请求处理流程并记录吞吐量统计数据以便分析" * 3,  # CJK
    "[2026-12-03 10:00:01 TP1] 🚀 server up 🔥🔥🔥 gen throughput 🙂" + "🎉" * 70,  # emoji
    "[2026-12-03 10:00:02] mixed ascii 日本語のログ行 and then more ascii text " * 3,
    "plain ascii " * 12,
]


def _row_texts(pane: LogPane, width: int) -> list[tuple[int, str, int]]:
    """(line index, painted text, its cells) for every wrapped row, painted as the pane paints it."""
    out = []
    rows = pane._wrapped_rows()
    pane.scroll_to(y=0, animate=False)
    for r in range(len(rows)):
        pane.scroll_to(y=r, animate=False, immediate=True)
        strip = pane.render_line(r - int(pane.scroll_y))
        text = "".join(seg.text for seg in strip)
        out.append((rows[r][0], text, strip.cell_length))
    return out


async def test_wrapped_rows_fit_the_width_and_keep_every_character() -> None:
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        pane = app.screen.query_one(LogPane)
        pane.add_lines([LogLine(i + 1, None, t) for i, t in enumerate(LINES)])
        pane.toggle_wrap()
        await pilot.pause()
        width = pane.scrollable_content_region.width
        rows = pane._wrapped_rows()
        for i, t in enumerate(LINES):
            n = sum(1 for r in rows if r[0] == i)
            assert n * width >= cell_len(t), (i, n, width)  # enough rows for every cell of the line
        painted = _row_texts(pane, width)
        for _i, text, cells in painted:
            assert cells == width and cell_len(text) <= width, (text, cells)
        for i, t in enumerate(LINES):
            joined = "".join(text.rstrip() for j, text, _c in painted if j == i)
            assert joined.replace(" ", "") == t.replace(" ", ""), (i, joined)


async def test_the_no_wrap_view_scrolls_to_the_end_of_a_wide_line() -> None:
    app = make_app()
    async with app.run_test(size=(100, 40)) as pilot:
        pane = app.screen.query_one(LogPane)
        pane.add_lines([LogLine(1, None, LINES[1])])
        await pilot.pause()
        assert pane.virtual_size.width >= cell_len(LINES[1]), (pane.virtual_size, cell_len(LINES[1]))
