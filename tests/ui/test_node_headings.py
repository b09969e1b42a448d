"""The ranks view of one server across nodes (issue 38): each node's ranks under a line that names
the node (index, host and address, head or headless, its server's state, the run's GPU processes
there); a single-node run exactly as before. The rows decide the number keys' order too."""

from __future__ import annotations

import dataclasses

from cockpit.supervisor.api import GpuProcess, NodeView
from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.widgets.rankbars import (
    NodeHeading,
    RankBars,
    node_heading_parts,
    rank_names,
    rank_rows,
    ranks_in_view_order,
)
from tests.ui.screen_text import screen_lines
from tests.ui.story import story_snapshot, two_node_snapshot
from tests.ui.test_dashboard_snapshots import feed, make_app

NODE0 = NodeView(0, "gpu-box-1", "10.0.0.1", "alive")
NODE1 = NodeView(1, "gpu-box-2", None, "alive")


def _words(row: str | NodeHeading) -> str:
    return " · ".join(node_heading_parts(row)) if isinstance(row, NodeHeading) else row


# ---- the rows (pure) ----

def test_a_single_node_run_has_its_ranks_alone_as_before() -> None:
    snap = story_snapshot(0.88, "ready")
    assert snap.nodes == () and rank_rows(snap) == rank_names(snap) == [f"TP{i}" for i in range(8)]
    one = dataclasses.replace(snap, nodes=(NodeView(0, "local", None, "alive"),))
    assert rank_rows(one) == rank_names(snap)  # one node: no heading line


def test_two_nodes_each_heads_its_own_ranks_in_node_order() -> None:
    snap = two_node_snapshot(processes=True)
    rows = rank_rows(snap)
    assert [_words(r) for r in rows] == [
        "node 0 · gpu-box-1 (10.0.0.1) · head · alive · 8 GPU processes",
        *(f"TP{i}" for i in range(8)),
        "node 1 · gpu-box-2 · headless · alive · 8 GPU processes",
        *(f"TP{i}" for i in range(8, 16)),
    ]
    # a process that is not the run's is not counted on its node's line
    foreign = GpuProcess(host="gpu-box-2", pid=999, gpu_index=0, used_gb=2.0, belongs_to_run=False)
    rows = rank_rows(dataclasses.replace(snap, gpu_processes=(*snap.gpu_processes, foreign)))
    assert _words(rows[9]).endswith("· alive · 8 GPU processes")


def test_a_dead_node_says_so_on_its_line_and_counts_no_processes() -> None:
    rows = rank_rows(two_node_snapshot(node1="died", processes=True))
    assert _words(rows[9]) == "node 1 · gpu-box-2 · headless · died"
    assert rows[10:] == [f"TP{i}" for i in range(8, 16)]  # its ranks stay under it, to be read


def test_a_node_whose_log_named_no_rank_yet_has_its_line_and_unplaced_ranks_are_not_put_under_a_node() -> None:
    snap = two_node_snapshot()
    early = {r: g for r, g in snap.rank_gpu.items() if g[0] == "gpu-box-1"}
    ranks = {r: m for r, m in snap.state.ranks.items() if r in early}
    state = snap.state.copy()
    state.ranks = ranks
    rows = rank_rows(dataclasses.replace(snap, state=state, rank_gpu=early,
                                         nodes=(NODE0, dataclasses.replace(NODE1, state="died"))))
    assert [_words(r) for r in rows] == ["node 0 · gpu-box-1 (10.0.0.1) · head · alive", *(f"TP{i}" for i in range(8)),
                                         "node 1 · gpu-box-2 · headless · died"]
    # a rank the rank → GPU map places on no node of the run: its own line, after the nodes
    state.ranks = {**ranks, "TP99": snap.state.ranks["TP0"]}
    rows = rank_rows(dataclasses.replace(snap, state=state, rank_gpu=early))
    assert [_words(r) for r in rows[-2:]] == ["ranks not placed on a node yet", "TP99"]


def test_the_number_keys_count_ranks_as_the_rows_show_them() -> None:
    snap = two_node_snapshot()
    assert ranks_in_view_order(snap) == rank_names(snap)  # the usual placement: the same order
    # a placement whose node 0 holds the higher ranks: the rows, and the keys, follow the nodes
    swapped = {r: ("gpu-box-2" if h == "gpu-box-1" else "gpu-box-1", i) for r, (h, i) in snap.rank_gpu.items()}
    order = ranks_in_view_order(dataclasses.replace(snap, rank_gpu=swapped))
    assert order == [f"TP{i}" for i in (*range(8, 16), *range(8))]


# ---- on screen ----

async def test_rank_rows_and_focus_stay_right_under_the_node_lines() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        screen.apply_snapshot(two_node_snapshot(processes=True))
        await pilot.pause()
        bars = screen.query_one(RankBars)
        lines = [bars.render_line(y).text for y in range(bars._row_count())]
        assert lines[0].startswith("RANK")
        assert lines[1].startswith("node 0 · gpu-box-1 (10.0.0.1) · head · alive · 8 GPU processes")
        assert [ln.split()[0] for ln in lines[2:10]] == [f"TP{i}" for i in range(8)]
        assert lines[10].startswith("node 1 · gpu-box-2 · headless · alive")
        assert [ln.split()[0] for ln in lines[11:19]] == [f"TP{i}" for i in range(8, 16)]
        assert lines[19].startswith("HOST") and "gpu-box-1" in lines[19] and "gpu-box-2" in lines[20]
        # each rank row reads its own GPU: TP11 is gpu-box-2's GPU 3, TP3's twin in the story
        assert lines[14].split()[-4:] == lines[5].split()[-4:]
        await pilot.press("4")
        await pilot.pause()
        assert screen.rank_focus == "TP3" and bars._focus_rank == "TP3"
        focused = bars.get_component_rich_style("rankbars--focused", partial=True)
        row = bars.render_line(5)  # TP3's row, two lines below node 0's heading and the column one
        label = [seg for seg in row if seg.text.strip() == "TP3"]
        assert row.text.startswith("TP3") and label and label[0].style is not None
        assert label[0].style.color == focused.color and label[0].style.reverse


async def test_a_died_node_is_named_on_its_line_and_in_the_advice() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        screen.apply_snapshot(two_node_snapshot(node1="died"))
        await pilot.pause()
        text = "\n".join(screen_lines(app))
        assert "node 0 · gpu-box-1 (10.0.0.1) · head · alive" in text
        assert "node 1 · gpu-box-2 · headless · died" in text
        assert "node 1 (gpu-box-2) died" in text  # the finding, in the advice panel
        bars = screen.query_one(RankBars)
        heading = bars.render_line(10)
        bad = bars.get_component_rich_style("rankbars--bad", partial=True)
        assert [seg.text for seg in heading if seg.style is not None and seg.style.color == bad.color] == ["died"]


# ---- snapshots ----

def test_two_nodes_with_their_lines_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), terminal_size=(120, 40), run_before=feed(two_node_snapshot(processes=True)))


def test_two_nodes_with_their_lines_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=feed(two_node_snapshot(processes=True)))


def test_two_nodes_node_1_died_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), terminal_size=(120, 40), run_before=feed(two_node_snapshot(node1="died")))
