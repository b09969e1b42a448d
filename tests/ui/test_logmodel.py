"""The live log's model (ring buffer, filtered selection, search) on its own, without Textual: the
LogPane widget only scrolls and paints what this model holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cockpit.backends import get_backend
from cockpit.core.logfilter import LineFilter
from cockpit.supervisor.api import LogLine
from cockpit.ui.logmodel import SELECT_FIRST_MAX, LogModel
from tests.ui.logflood import flood
from tests.ui.plainpython import run_without_textual

DATA = Path(__file__).resolve().parents[1] / "data"
KIMI = DATA / "sglang-0.5.9-kimi-0.93-prefill-oom.log"
SGLANG = get_backend("sglang").logs.filter_presets()
RECORD_RANK = get_backend("sglang").logs.record_rank


def _real_log() -> list[LogLine]:
    """A real SGLang start-up that died of a prefill OOM, each line with its record's rank."""
    out, rank = [], None
    for i, text in enumerate(KIMI.read_text().splitlines()):
        rank = RECORD_RANK(text) or rank
        out.append(LogLine(i + 1, rank, text))
    return out


def test_the_model_runs_without_textual() -> None:
    """Filtering and searching a real log works in a fresh interpreter where textual and rich
    cannot be imported."""
    code = f"""
import json, sys
from pathlib import Path
from cockpit.backends import get_backend
from cockpit.core.logfilter import LineFilter
from cockpit.supervisor.api import LogLine
from cockpit.ui.logmodel import LogModel
m = LogModel(1000)
m.add(LogLine(i + 1, None, t) for i, t in enumerate(Path({str(KIMI)!r}).read_text().splitlines()))
m.set_filter(LineFilter("errors", presets=get_backend("sglang").logs.filter_presets()), None, want=5)
m.finish_selection()
m.set_search("out of memory")
hits = m.first_hit(bottom=len(m.shown) - 1)
print(json.dumps([hits, len(m.shown)]))
"""
    hits, shown = run_without_textual(code)  # type: ignore[misc]
    assert shown > 0 and hits > 0


def test_a_filter_selected_in_slices_equals_one_pass_over_the_ring() -> None:
    m = LogModel(5000)
    m.add(flood(6000))  # the ring keeps the newest 5000
    assert len(m.lines) == 5000 and m.total_seen == 6000 and m.lines[0].number == 1001
    matcher = LineFilter("memory", presets=SGLANG)
    m.set_filter(matcher, None, want=10)
    # the newest `want` matches at once, the rest left for slices
    assert [ln.number for ln in m.shown] == [ln.number for ln in m.lines if "avail mem" in ln.text][-10:]
    assert m.unselected == 5000 - 500  # 10 matches, one in 50 lines: the newest 500 lines checked
    slices = 0
    while m.unselected:
        m.select_slice(1000)
        slices += 1
    assert slices == 5
    assert list(m.shown) == [ln for ln in m.lines if "avail mem" in ln.text]


def test_a_first_selection_checks_at_most_its_budget() -> None:
    m = LogModel(20_000)
    m.add(flood(20_000))
    m.set_filter(LineFilter("no such words anywhere", presets=SGLANG), None, want=40)
    assert len(m.shown) == 0 and m.unselected == 20_000 - SELECT_FIRST_MAX
    assert m.finish_selection() == 0 and m.unselected == 0


def test_a_rank_and_a_filter_select_together_and_new_lines_follow_them() -> None:
    m = LogModel()
    lines = _real_log()
    m.add(lines)
    m.set_filter(LineFilter("memory", presets=SGLANG), "TP3", want=1000)
    m.finish_selection()
    want = [ln for ln in lines if ln.rank == "TP3" and LineFilter("memory", presets=SGLANG).matches(ln.text, ln.rank)]
    assert want and list(m.shown) == want
    added = m.add([LogLine(10**6, "TP3", "[2026-11-29 11:58:00 TP3] Load weight end. avail mem=1.00 GB"),
                   LogLine(10**6 + 1, "TP2", "[2026-11-29 11:58:00 TP2] Load weight end. avail mem=1.00 GB")])
    assert added == 1 and m.shown[-1].number == 10**6
    m.set_filter(None, None, want=1)  # no filter: everything, at once
    assert list(m.shown) == list(m.lines) and m.unselected == 0


def test_lines_that_fall_off_the_ring_leave_the_pending_selection() -> None:
    m = LogModel(1000)
    m.add(flood(1000))
    m.set_filter(LineFilter("memory", presets=SGLANG), None, want=2)
    pending = m.unselected
    assert pending == 1000 - 100
    m.add(flood(300, start=1000))  # 300 of the oldest, never selected, fall off
    assert m.unselected == pending - 300
    m.finish_selection()
    assert list(m.shown) == [ln for ln in m.lines if "avail mem" in ln.text]


def test_control_characters_are_cleaned_and_drops_are_counted() -> None:
    m = LogModel()
    assert m.add([LogLine(1, None, "\x1b[31mred\x1b[0m and a bell\x07")], dropped=7) == 1
    assert m.dropped == 7
    assert "\x1b" not in m.lines[0].text and "\x07" not in m.lines[0].text and "red" in m.lines[0].text
    m.clear()
    assert not m.lines and not m.shown and m.total_seen == 1


def test_search_finds_the_newest_match_above_the_view_and_walks_both_ways() -> None:
    m = LogModel()
    lines = _real_log()
    m.add(lines)
    want = [i for i, ln in enumerate(lines) if re.search("load weight", ln.text, re.IGNORECASE)]
    assert len(want) >= 3
    m.set_search("load weight")  # lower case: case-insensitive, as less -i
    bottom = want[-1] - 1  # the view ends above the newest match
    assert m.first_hit(bottom) == len(want)
    assert m.hit == want[-2]
    assert m.search_next(older=True, bottom=None) == want[-3] == m.hit
    assert m.search_next(older=False, bottom=None) == want[-2]
    assert m.search_next(older=False, bottom=None) == want[-1]
    assert m.search_next(older=False, bottom=None) is None and m.hit == want[-1]
    m.set_search("Load Weight")  # a capital: case matters
    assert m.first_hit(len(lines) - 1) == 0 and m.hit is None
    m.clear_search()
    assert m.search_rx is None and m.search_next(older=True, bottom=0) is None


def test_a_bad_search_pattern_leaves_the_search_as_it_was() -> None:
    m = LogModel()
    m.add(_real_log())
    m.set_search("avail mem")
    with pytest.raises(re.error):
        m.set_search("avail (mem")
    assert m.search_rx is not None and m.search_rx.pattern == "avail mem"
