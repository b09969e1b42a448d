"""The decisive lines at the end of a log (cockpit/core/logtail.py) and the words for an exit code
and an unreachable host: pure functions behind issue 17's defects 2, 13 and `check`."""

from __future__ import annotations

from cockpit.core.logtail import decisive_tail
from cockpit.telemetry.hostfacts import unreachable_words
from cockpit.transport.base import HostKeyError, Unreachable
from cockpit.ui.format import exit_words, progress_words


def test_the_last_traceback_header_frame_and_exception() -> None:
    lines = [
        "starting…",
        "Traceback (most recent call last):",
        '  File "/x/a.py", line 3, in <module>',
        "    import b",
        '  File "/x/b.py", line 1, in <module>',
        "    import sglang",
        "ModuleNotFoundError: No module named 'sglang'",
        "",
    ]
    assert decisive_tail(lines) == [
        "Traceback (most recent call last):",
        '  File "/x/b.py", line 1, in <module>',
        "    import sglang",
        "ModuleNotFoundError: No module named 'sglang'",
    ]


def test_no_traceback_gives_the_last_lines_cleaned() -> None:
    lines = [f"line {i}" for i in range(10)] + ["\x1b[31merror: bad flag\x1b[0m"]
    assert decisive_tail(lines, 3) == ["line 8", "line 9", "error: bad flag"]
    assert decisive_tail([]) == []


def test_exit_codes_in_words() -> None:
    assert "server's own cleanup" in exit_words(137, "cuda_oom") and "not the kernel" in exit_words(137, "cuda_oom")
    assert "kernel's OOM killer (host memory)" in exit_words(137, "host_oom_killed")
    assert "from outside" in exit_words(-9, "unknown")
    assert exit_words(143) == "exit code 143: SIGTERM (asked to stop)"
    assert exit_words(1) == "exit code 1"
    assert progress_words("the server on local exited with code 137", "cuda_oom").startswith(
        "the server on local exited: exit code 137: SIGKILL")
    assert progress_words("launching the server", None) == "launching the server"


def test_unreachable_hosts_say_why() -> None:
    assert unreachable_words(Unreachable("h: cannot reach h:22: Name or service not known")).startswith("DNS")
    assert unreachable_words(Unreachable("h: cannot reach 1.2.3.4:22: Connect call failed")).startswith(
        "connection refused")
    assert unreachable_words(Unreachable("h: no answer", timed_out=True)).startswith("no answer (timed out)")
    assert unreachable_words(HostKeyError("h: host key changed", hint="ssh-keygen -R h")).startswith("host key refused")
    assert "ssh-keygen -R h" in unreachable_words(HostKeyError("h: host key changed", hint="ssh-keygen -R h"))
    assert unreachable_words(OSError("Permission denied (publickey)")).startswith("authentication refused")
