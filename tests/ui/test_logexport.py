"""The export controller (`ui/logexport.py`) without Textual: the advised command line from a real
backend's argv builder, the file names, the private files it writes, the pager it hands over to."""

from __future__ import annotations

import asyncio
import shlex
import stat
from pathlib import Path

from cockpit.core.profile import parse_profile
from cockpit.ui.logexport import LogExport, pager_argv
from tests.ui.story import T0, story_snapshot

PROFILE = parse_profile({"name": "demo", "hosts": [{"ssh": "local"}],
                         "server": {"model-path": "/models/Kimi-K2.5", "tp": 8, "mem-fraction-static": 0.93}},
                        "demo.yaml")


def test_the_advised_command_applies_the_headroom_advice_only() -> None:
    export = LogExport(lambda: PROFILE)
    line = export.advised_command(story_snapshot(0.93, "ready"))
    assert line is not None
    argv = shlex.split(line)
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.88" and argv[argv.index("--tp-size") + 1] == "8"
    assert export.advised_command(story_snapshot(0.88, "ready")) is None  # enough headroom: no advice
    assert export.advised_command(None) is None


def test_file_names_say_the_profile_the_run_and_what_was_saved() -> None:
    export = LogExport(lambda: PROFILE, clock=lambda: T0)
    name = export.file_name("visible", story_snapshot(0.93, "ready"))
    assert name.startswith("cockpit-demo-20261129-115402-demo-visible-") and name.endswith(".log")
    assert export.file_name("all", None).startswith("cockpit-demo-no-run-all-")


def test_lines_go_to_a_new_private_file_never_over_an_existing_one(tmp_path: Path) -> None:
    export = LogExport(lambda: PROFILE)
    path = tmp_path / "saved.log"
    assert asyncio.run(export.write(path, ["one", "two"])) is None
    assert path.read_text() == "one\ntwo\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    error = asyncio.run(export.write(path, ["three"]))
    assert error is not None and error.startswith(f"could not write {path}: ") and path.read_text() == "one\ntwo\n"


def test_the_pager_is_PAGER_else_less() -> None:
    assert pager_argv(Path("/tmp/x.log"), {"PAGER": "most -s"}) == ["most", "-s", "/tmp/x.log"]
    assert pager_argv(Path("/tmp/x.log"), {}) == ["less", "-R", "/tmp/x.log"]
