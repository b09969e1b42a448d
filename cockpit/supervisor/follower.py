"""Following the nodes' logs into the run's one RunState.

Each node's log is read by the one reading loop (cockpit/supervisor/logstream.py, `cockpit logs`'
too) through its NodeLog (events for the state, lines for the publisher).
Every node's events fold into one `RunState` (`RunFold`). A log of many GB is read as its head
(the startup, where the memory story is) and its last lines; the lines between are counted on
the host so line numbers stay exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cockpit.backends.base import Backend
from cockpit.core.findings import Finding
from cockpit.core.reducer import apply
from cockpit.core.state import RunState
from cockpit.remote.host import LinkState, LogFollower, LogReset, ServerExited
from cockpit.remote.hostresults import LogScan
from cockpit.supervisor.api import LogLine
from cockpit.supervisor.logstream import LogItem, Read, read_log
from cockpit.supervisor.nodelog import NodeLog
from cockpit.supervisor.nodes import Node
from cockpit.supervisor.publisher import Publisher
from cockpit.transport.base import TransportError

BIG_LOG_BYTES = 256 << 20  # a run's log above this is read as head + tail (lines between counted)
BIG_LOG_HEAD_BYTES = 64 << 20  # the startup (memory lifecycle) is in the first MBs of a run
BIG_LOG_TAIL_LINES = 20000


class RunFold:
    """The run's one RunState, folded from every node's events."""

    def __init__(self, backend: Backend, nodes: int) -> None:
        self.backend = backend
        self.multi_node = nodes > 1
        self.state: RunState = backend.logs.new_state()
        self.changed = True  # since the findings were last computed

    def reset(self) -> None:
        self.state = self.backend.logs.new_state()
        self.changed = True

    def apply(self, node: Node, ev: Any) -> None:
        """Fold one node's event into the state.

        Every node's log starts with the server-arguments dump, and the reducer reads a second
        dump as a new run appended to the log (it resets the state). In a multi-node run a node's
        first dump is not that: take its arguments (node 0's win) without resetting the other
        nodes' ranks.
        """
        if self.multi_node:
            # each node's own reading beside the run's: what node k said last when it dies
            if node.own is None:
                node.own = self.backend.logs.new_state()
            apply(node.own, ev)
        if self.multi_node and self.backend.logs.is_server_args(ev):
            first_of_node = not node.args_seen
            node.args_seen = True
            st = self.state
            if first_of_node and (st.ranks or st.crash is not None or st.ready_in_log):
                scratch = self.backend.logs.new_state()
                apply(scratch, ev)
                if node.index == 0 or not st.server_args:
                    st.server_args = scratch.server_args
                    st.format = scratch.format or st.format
                return
        apply(self.state, ev)


def link_finding(item: LinkState) -> Finding:
    """A link that will not come back by itself (the host key CHANGED) is a critical finding:
    the advice pane and `status` keep showing it, with the fingerprint and how to accept."""
    return Finding("host_key_changed", "critical", item.reason + (f". {item.hint}" if item.hint else ""))


class Follow:
    """Reads nodes' logs into a RunFold and a Publisher; tells the supervisor about exits."""

    def __init__(
        self,
        fold: RunFold,
        publisher: Publisher,
        on_exit: Callable[[Node, ServerExited], None],
        say: Callable[[str], None],
    ) -> None:
        self.fold = fold
        self.publisher = publisher
        self.on_exit = on_exit
        self.say = say  # progress words for the operator
        self.link_findings: dict[str, Finding] = {}  # node label -> why its link will not come back
        self.line_listeners: list[Callable[[Sequence[LogLine]], None]] = []  # the hang watch's rank clocks

    def log_of(self, node: Node) -> NodeLog:
        if node.log is None:
            node.log = NodeLog(self.fold.backend, node.label)
        return node.log

    def take(self, node: Node, read: Read) -> None:
        """One chunk's events into the run's state, its lines to the publisher and the listeners."""
        fold = self.fold
        for ev in read.events:
            fold.apply(node, ev)
        fold.changed = True
        lines = [p.line for p in read.pieces if not p.continued]  # a giant line's start stands for it
        self.publisher.add_lines(lines, read.own)
        for listen in self.line_listeners:
            listen(lines)

    def finish(self, node: Node) -> None:
        if node.log is not None:
            for ev in node.log.finish():
                self.fold.apply(node, ev)

    async def follow(self, node: Node, *, follow: bool) -> None:
        """Read the node's log of the run from where it was read up to: to its end (follow
        False), or on until the server exits and the task is cancelled."""
        record = node.record
        assert record is not None
        nl = self.log_of(node)
        watch = {"pid": record.pid, "run_dir": record.run_dir} if record.pid and follow else None
        if nl.cursor is not None:  # read before (status, then follow): resume, never re-read
            offset, ino = nl.cursor
        else:
            offset, ino = await self._read_big_log_head(node, record.log_offset, record.log_inode)

        def on_item(item: LogItem) -> None:
            if isinstance(item, Read):
                self.take(node, item)
            elif isinstance(item, ServerExited):
                self.on_exit(node, item)
            elif isinstance(item, LogReset):
                self.say(f"{node.label}: log {item.why}; following the new file")
            elif item.fatal:
                node.link_up = False
                self.link_findings[node.label] = link_finding(item)
                self.say(f"{item.reason}; not reconnecting")
            else:
                node.link_up = item.up
                self.say("" if item.up else f"{node.label}: connection lost ({item.reason}); reconnecting")

        def on_open(fol: LogFollower | None) -> None:
            node.follower = fol  # the supervisor's stop closes it

        await read_log(nl, node.ops, record.log_path, on_item, offset=offset, ino=ino, follow=follow, watch=watch,
                       on_open=on_open)
        if not follow:
            self.finish(node)
            ended = node.record
            over = ended is not None and (ended.exit_code is not None or ended.lost)  # lost: no waiter left
            if ended is not None and not ended.alive and over and node.exited is None:
                self.on_exit(node, ServerExited(ended.pid or 0, ended.exit_code, None, ended.oom_evidence))

    async def _read_big_log_head(self, node: Node, offset: int, ino: int | None) -> tuple[int, int | None]:
        """A run's log of many GB (days of batch lines) is not read whole: its head and its last
        lines are. Returns where following starts."""
        assert node.record is not None
        path = node.record.log_path
        try:
            scan = LogScan.from_wire(await node.ops.scan(path, offset, ino, head_bytes=BIG_LOG_HEAD_BYTES,
                                                         tail_lines=BIG_LOG_TAIL_LINES))
        except (TransportError, OSError, KeyError, ValueError):
            return offset, ino  # e.g. no log yet: follow from the start
        if scan.size - scan.offset <= BIG_LOG_BYTES:
            return offset, ino
        nl = self.log_of(node)

        def on_item(item: LogItem) -> None:
            if isinstance(item, Read):
                self.take(node, item)

        await read_log(nl, node.ops, path, on_item, offset=scan.offset, ino=scan.ino, follow=False, end=scan.head_end)
        nl.skip_lines(scan.skipped_lines)
        self.say(f"{node.label}: a {scan.size / 1e9:.1f} GB log: read its startup and its last "
                 f"{BIG_LOG_TAIL_LINES} lines ({scan.skipped_lines} lines between were counted, not parsed)")
        return scan.tail_start, scan.ino
