"""Text from a server log made safe for the operator's terminal.

Anything that can write into the server log (a request echoed in an error message, another user
of a shared workdir) must not be able to drive the terminal Cockpit prints to: set its title,
write the clipboard (OSC 52), reset it (`ESC c`), open hyperlinks (OSC 8) or start a device
control string. Colour codes are dropped too: Cockpit colours its own output.

One function for every path that shows log text (parser, `diagnose`, `status`, `logs`, the
journal, the TUI), so that no path keeps a narrower copy of the rule.
"""

from __future__ import annotations

import re

# ECMA-48: CSI (ESC [ … final byte), string controls OSC/DCS/SOS/PM/APC (ESC ] P X ^ _ … up to
# BEL or ST, or to the end of the text when unterminated: a cut line must not leak the rest),
# 8-bit C1 forms of the same, then any other two-byte escape (ESC c, ESC 7, ESC =, …).
_ESCAPES = re.compile(
    r"""
      \x1b\[[0-?]*[ -/]*[@-~]?              # CSI
    | \x9b[0-?]*[ -/]*[@-~]?                # 8-bit CSI
    | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]) .*? (?:\x07|\x1b\\|\x9c|$)   # string controls
    | \x1b[ -~]?                             # other escapes, or a lone ESC
    """,
    re.VERBOSE | re.DOTALL,
)
# C0 controls but tab and newline, DEL, and the remaining C1 controls.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROLS_NO_NL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def has_control(text: str) -> bool:
    """True when `text` holds anything `clean_text` would remove (cheap pre-check for hot paths)."""
    return _CONTROLS.search(text) is not None


def clean_text(text: str, *, keep_newlines: bool = True) -> str:
    """`text` without escape sequences and control characters (tab kept; newlines unless told).

    A carriage return is removed, not interpreted: callers that must honour tqdm's `\\r` redraws
    (the log parser) cut at the last `\\r` before calling this.
    """
    if not has_control(text) and (keep_newlines or "\n" not in text):
        return text
    text = _ESCAPES.sub("", text)
    return (_CONTROLS if keep_newlines else _CONTROLS_NO_NL).sub("", text)


_VISIBLE = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: str) -> str:
    """`text` for one line of Cockpit's own output (a process's name, a thread's, a frame's): escape
    sequences dropped as `clean_text` drops them, every other control character — newline, tab
    and carriage return included — shown escaped (`\\n`, `\\x07`), so that a name cannot begin a
    line of its own nor hide what it holds."""
    if not _CONTROLS_NO_NL.search(text) and "\t" not in text:
        return text
    text = _ESCAPES.sub("", text)
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: _VISIBLE.get(m.group(), f"\\x{ord(m.group()):02x}"), text)
