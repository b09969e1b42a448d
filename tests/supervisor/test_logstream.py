"""The one reading loop (cockpit/supervisor/logstream.py): the TUI's follower and `cockpit logs` read
a node's log through `read_log`, so they number the same lines, give them the same ranks and hide
the same lines (Cockpit's own access lines, core/ownlines.py). Real files, the real host program."""

from __future__ import annotations

import ast
from pathlib import Path

from cockpit.backends import get_backend
from cockpit.core.profile import Host
from cockpit.remote.host import HostOps, LogReset
from cockpit.remote.hostresults import RunRecord
from cockpit.supervisor.api import LogLine
from cockpit.supervisor.follower import Follow, RunFold
from cockpit.supervisor.logstream import LogItem, Read, read_log
from cockpit.supervisor.nodelog import NodeLog
from cockpit.supervisor.nodes import Node
from cockpit.supervisor.publisher import Publisher
from cockpit.transport.local import LocalTransport

OWN = b'[2026-02-24 11:57:43] INFO:     127.0.0.1:5 - "GET /metrics?by=cockpit HTTP/1.1" 200 OK\n'
LOG = (
    b"[2026-02-24 11:55:12] server_args=ServerArgs(model_path='/m', tp_size=2)\n"
    + OWN
    + b"[2026-02-24 11:55:13 TP1] Load weight begin. avail mem=77.50 GB\n"
    + b"Traceback (most recent call last):\n"
    + b'[2026-02-24 11:57:44] INFO:     10.0.0.9:7 - "GET /health HTTP/1.1" 200 OK\n'  # a balancer's: shown
    + OWN
    + b"\x1b[31m[2026-02-24 11:55:14 TP0] coloured\x1b[0m\n"
    + b"tqdm 10%\rtqdm 100%\n"
    + b"x" * (5 << 20) + b"\n"  # longer than a frame of the host's follower (4 MB): arrives in pieces
    + OWN
    + b"[2026-02-24 11:55:15 TP1] the last line, still being written"
)


def _ops(tmp_path: Path) -> HostOps:
    return HostOps(LocalTransport(), runs_root=str(tmp_path / "runs"))


async def test_the_tui_and_cockpit_logs_are_handed_the_same_lines_and_hide_the_same(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(LOG)
    backend = get_backend("sglang")
    ops = _ops(tmp_path)

    # the TUI: the supervisor's follower into the run's state and the publisher's ring
    fold = RunFold(backend, 1)
    publisher = Publisher(lambda: None)  # type: ignore[arg-type,return-value]
    follow = Follow(fold, publisher, on_exit=lambda *_: None, say=lambda _s: None)
    node = Node(0, Host(ssh="local"), LocalTransport(), ops, "k", str(log),
                record=RunRecord(run_id="r", log_path=str(log), log_offset=0))
    await follow.follow(node, follow=False)
    tui = publisher.recent_lines()
    assert node.log is not None and node.log.own_lines == 3

    # `cockpit logs` on a terminal and into a pipe: its NodeLogs, through the same loop
    printed: dict[bool, list[LogLine]] = {}
    own: dict[bool, int] = {}
    for raw in (False, True):
        nl = NodeLog(backend, "local", parse=False, raw=raw, catch_up=None)
        got: list[LogLine] = []

        def on_item(item: LogItem, got: list[LogLine] = got) -> None:
            assert not isinstance(item, LogReset)
            if isinstance(item, Read):
                got.extend(p.line for p in item.pieces if not p.continued)

        await read_log(nl, ops, str(log), on_item, offset=0, ino=None, follow=False)
        printed[raw], own[raw] = got, nl.own_lines
        assert nl.cursor is not None and nl.cursor[0] == len(LOG)  # read to its end (no follow)

    numbers = [ln.number for ln in tui]
    assert numbers == [1, 3, 4, 5, 7, 8, 9, 11]  # the file's numbering; 2, 6 and 10 are Cockpit's
    assert [(ln.number, ln.rank, ln.text) for ln in printed[False]] == [(ln.number, ln.rank, ln.text) for ln in tui]
    assert [(ln.number, ln.rank) for ln in printed[True]] == [(ln.number, ln.rank) for ln in tui]
    assert own == {False: 3, True: 3}
    assert not any("by=cockpit" in ln.text for ln in tui + printed[False] + printed[True])
    assert any("10.0.0.9" in ln.text for ln in tui)  # someone else's request is never hidden
    # the TUI's parser read every line, its own requests' included; the state has the run's args
    assert fold.state.server_args and node.log.parser is not None and node.log.parser.lines_seen == 11


def test_one_reading_loop_opens_a_log_follower() -> None:
    """A scan of the source (ast): outside cockpit/remote (where the follower lives), only the one
    loop constructs a `LogFollower`, so no other loop can iterate one; the TUI's follower and
    `cockpit logs` call `read_log`. Host tests that exercise the follower itself are not scanned."""
    repo = Path(__file__).resolve().parents[2]
    opens, calls = [], {}
    for path in sorted((repo / "cockpit").rglob("*.py")):
        rel = path.relative_to(repo).as_posix()
        if rel.startswith("cockpit/remote/"):
            continue
        tree = ast.parse(path.read_text())
        names = [n.func.id if isinstance(n.func, ast.Name) else n.func.attr for n in ast.walk(tree)
                 if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))]
        if "LogFollower" in names:
            opens.append(rel)
        calls[rel] = names.count("read_log")
    assert opens == ["cockpit/supervisor/logstream.py"], opens
    assert calls["cockpit/supervisor/follower.py"] >= 2  # the tail, and a huge log's head
    assert calls["cockpit/commands/logs.py"] >= 2  # the last matches, the tail or follow
    assert calls["cockpit/commands/_launching.py"] >= 1  # a failed launch's lines (up, restart and logs share it)
