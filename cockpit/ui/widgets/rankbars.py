"""Per-rank GPU memory bars: used/total from telemetry, split by what the log says the memory holds.

One source for the bar and the USED column: the bar's filled length is the telemetry's used memory;
the log's breakdown (weights, KV, graphs) only divides that length, capped to it, so a crashed run
whose memory was released shows empty bars beside USED 0.0 rather than the last breakdown. A
sample older than STALE_AFTER_S greys the bar and the numbers, with its age in AGE. AFTER CAPTURE is
the free memory the log reported right after CUDA-graph capture (the headroom the advice is about),
not live free memory: live free is TOTAL − USED, so USED + AFTER CAPTURE may exceed TOTAL once
requests run. After the run ended it is greyed: it describes the run that ended.

A CPU engine (the log proved it: RunState.device == "cpu") has no GPU to draw: its rank rows show
the KV cache the engine printed against its NUMA node's memory, and the host row the host's RAM in
GiB, as vLLM prints it; never a `?/? GiB` GPU row.

A run across several nodes (RunSnapshot.nodes) shows each node's ranks under a line that names the
node: its index, host and address, head (serves the API) or headless, and its server's state with
the run's processes telemetry sees on its GPUs (`node 1 · gpu-box-2 · headless · died`). A
single-node run has no such line: its rows are as they always were."""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from cockpit.face import (
    GpuProcess,
    GpuSample,
    HostSample,
    NodeView,
    RankMemory,
    RunSnapshot,
    plural,
    rank_sort_key,
)
from cockpit.ui import format as fmt
from cockpit.ui.widgets.strips import RowRepaint, StripCache

STALE_AFTER_S = 5.0  # telemetry arrives about once a second; older than this is dimmed

# Glyphs differ per segment so the breakdown survives a monochrome terminal.
GLYPHS = {"weights": "█", "kv": "▓", "graphs": "▒", "other": "▚", "foreign": "▞", "free": "░"}


@dataclass(frozen=True)
class Policy:
    target_headroom_gb: float = 5.0
    warn_headroom_gb: float = 3.0


def gpu_for_rank(snapshot: RunSnapshot, rank: str, position: int) -> GpuSample | None:
    """The telemetry sample of the GPU this rank runs on (by the supervisor's rank → GPU map)."""
    where = snapshot.rank_gpu.get(rank)
    if where is not None:
        host, index = where
        for g in snapshot.gpus:
            if g.index == index and (g.host == host or not host or not g.host):
                return g
        return None
    # No map yet (very early in startup): fall back to order, which is how a single node lists them.
    return snapshot.gpus[position] if position < len(snapshot.gpus) else None


def foreign_gb(snapshot: RunSnapshot, gpu: GpuSample | None) -> float | None:
    """Memory on this GPU held by processes that are not part of the run (leftovers, other users)."""
    if gpu is None:
        return None
    held = [p.used_gb for p in snapshot.gpu_processes if _on(p, gpu) and not p.belongs_to_run and p.used_gb]
    return sum(held) if held else None


def _on(p: GpuProcess, g: GpuSample) -> bool:
    return p.gpu_index == g.index and (p.host == g.host or not p.host or not g.host)


def rank_names(snapshot: RunSnapshot) -> list[str]:
    """Every rank known from the log or mapped by the supervisor, in rank order (logs interleave)."""
    names = set(snapshot.state.ranks) | set(snapshot.rank_gpu)
    return sorted(names, key=rank_sort_key)


@dataclass(frozen=True)
class NodeHeading:
    """The line above one node's ranks. `node` None: ranks the rank → GPU map places on no node of
    the run yet (they are shown, under their own line, rather than under a node they may not be on)."""

    node: NodeView | None
    processes: int  # the run's processes telemetry sees on this node's GPUs


def rank_rows(snapshot: RunSnapshot) -> list[str | NodeHeading]:
    """The rank rows in screen order: the rank names alone for a single node; across nodes, each
    node's heading then its ranks (by the supervisor's rank → host map), in node-rank order. A node
    whose log has named no rank yet still has its heading: its state is news (a node that died at
    start-up)."""
    names = rank_names(snapshot)
    if len(snapshot.nodes) <= 1:
        return list(names)
    rows: list[str | NodeHeading] = []
    placed: set[str] = set()
    for node in snapshot.nodes:
        mine = [n for n in names if n in snapshot.rank_gpu and snapshot.rank_gpu[n][0] == node.host]
        procs = sum(1 for p in snapshot.gpu_processes if p.belongs_to_run and p.host == node.host)
        rows.append(NodeHeading(node, procs))
        rows += mine
        placed.update(mine)
    if unplaced := [n for n in names if n not in placed]:
        rows.append(NodeHeading(None, 0))
        rows += unplaced
    return rows


def ranks_in_view_order(snapshot: RunSnapshot) -> list[str]:
    """The ranks as the rows show them, top to bottom: what the number keys 1-8 count."""
    return [r for r in rank_rows(snapshot) if isinstance(r, str)]


def node_heading_parts(heading: NodeHeading) -> list[str]:
    """`node 0`, `gpu-box-1 (10.0.0.1)`, `head`, `alive`, `8 GPU processes`: the heading's words,
    which the line joins with ` · `. The state is the fourth."""
    node = heading.node
    if node is None:
        return ["ranks not placed on a node yet"]
    where = f"{node.host} ({node.address})" if node.address and node.address != node.host else node.host
    parts = [f"node {node.index}", where, "head" if node.index == 0 else "headless", node.state]
    if heading.processes and node.state == "alive":
        parts.append(plural(heading.processes, "GPU process", "GPU processes"))
    return parts


class RankBars(RowRepaint, Widget):
    """One row per rank across all nodes, then one row per host for RAM and the host cache's share
    (KV pages the engine keeps in host RAM, by its own name: SGLang's HiCache)."""

    DEFAULT_CSS = """
    RankBars { height: auto; }
    """

    COMPONENT_CLASSES = {
        "rankbars--heading",
        "rankbars--node",
        "rankbars--label",
        "rankbars--focused",
        "rankbars--weights",
        "rankbars--kv",
        "rankbars--graphs",
        "rankbars--other",
        "rankbars--foreign",
        "rankbars--free",
        "rankbars--unknown",
        "rankbars--ok",
        "rankbars--warn",
        "rankbars--bad",
        "rankbars--stale",
        "rankbars--host-cache",
    }

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._snapshot: RunSnapshot | None = None
        self._now: float = 0.0
        self._policy = Policy()
        self._focus_rank: str | None = None
        self._host_cache_gb_per_rank: float | None = None
        self._host_cache_label: str | None = None
        self._rows_of: RunSnapshot | None = None
        self._rows: list[str | NodeHeading] = []  # rank names, and the node headings between them
        self._names: list[str] = []
        self._position: dict[str, int] = {}  # a rank's place among the ranks (the GPUs' order before a map)
        self._strips = StripCache()  # rows that read as a second ago are not converted again
        self._tail = 0  # characters at the end of the row just built that change every second
        self._init_rows()
        self._painted_from: object = None  # everything the rows were last looked at for (_inputs)

    def show(
        self,
        snapshot: RunSnapshot,
        now: float,
        policy: Policy,
        focus_rank: str | None = None,
        host_cache_gb_per_rank: float | None = None,
        host_cache_label: str | None = None,
    ) -> None:
        rows_before = self._row_count()
        self._snapshot, self._now, self._policy = snapshot, now, policy
        self._focus_rank = focus_rank
        self._host_cache_gb_per_rank = host_cache_gb_per_rank
        self._host_cache_label = host_cache_label
        if self._row_count() != rows_before:
            self._painted_from = None
            self.refresh(layout=True)
        else:
            self._refresh_changed_rows()

    def tick(self, now: float) -> None:
        """Ages only: the 1 Hz clock."""
        if self._snapshot is not None and 0 <= now - self._now < 1.0:
            # A snapshot (telemetry at 1 Hz) painted fresh ages less than a second ago: the ages on
            # screen (`<2s`, then whole seconds) are as new as this clock's, and a second repaint of every
            # rank row would double the idle CPU (64 ranks: ~25 ms a paint). The clock and the
            # samples both tick at 1 Hz, at any phase to each other: under 0.5 s, half the ticks
            # repainted. When the samples stop, this repaints each second and the ages count up.
            return
        self._now = now
        self._refresh_changed_rows()

    def _refresh_changed_rows(self) -> None:
        """Repaint the rows on screen that now read differently (RowRepaint); none at all when
        nothing a row reads has changed."""
        inputs = self._inputs()
        if inputs == self._painted_from and self._painted:
            # Nothing any row shows has changed (a snapshot for the engine's /metrics or a
            # /health probe, or a sample that reads as the last): not even the rows are rebuilt.
            return
        self._painted_from = inputs
        self.repaint_changed_rows(self._row_count())

    def _inputs(self) -> object:
        """Everything a row reads, as a value compared with the last one's: the widget's own
        settings, the run's ranks and phase, and each GPU's and host's figures with their age as
        the rows say it (whole seconds, stale or not) — not the sample times themselves."""
        snap, now = self._snapshot, self._now
        if snap is None:
            return None
        stale = STALE_AFTER_S
        gpus = tuple(
            (g.host, g.index, g.used_gb, g.total_gb, g.util_pct, fmt.sample_age(now - g.sampled_at), now - g.sampled_at > stale)
            for g in snap.gpus
        )
        # a host's RAM moves by kilobytes every sample while its row shows whole GB (GiB to a
        # tenth on a CPU engine) and a bar of cells: the row's words are its key (a few hosts)
        label_w, bar_w = self._columns(rank_names(snap))[:2]
        host_row = self._cpu_host_row if snap.state.device == "cpu" else None
        hosts = tuple(
            (host_row(h, label_w, bar_w) if host_row else self._host_row(snap, h, label_w, bar_w)).plain
            for h in snap.hosts
        )
        return (
            self.size.width, self._focus_rank, self._policy, self._host_cache_gb_per_rank, self._host_cache_label,
            snap.state.device, snap.state.phase, snap.lifecycle, snap.state.host_cache_gb_per_rank,
            snap.state.ranks, snap.rank_gpu, snap.gpu_processes, gpus, hosts, snap.nodes,
        )

    def _row_count(self) -> int:
        if self._snapshot is None:
            return 2
        return 1 + max(1, len(self._rows_for(self._snapshot))) + max(1, len(self._snapshot.hosts))

    def _rows_for(self, snap: RunSnapshot) -> list[str | NodeHeading]:
        if self._rows_of is not snap:  # once per snapshot, not once per row
            self._rows_of, self._rows = snap, rank_rows(snap)
            self._names = [r for r in self._rows if isinstance(r, str)]
            self._position = {n: i for i, n in enumerate(self._names)}
        return self._rows

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self._row_count()

    # ---- rendering ----
    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"rankbars--{name}", partial=True)

    def render_line(self, y: int) -> Strip:
        """One row. Textual asks only for the rows on screen: with 64 ranks in a box that shows
        a dozen, the others cost nothing until scrolled to (they used to be built on every paint).
        Each row goes through the same conversion Textual applies to a whole `render()`."""
        width = self.size.width
        self._tail = 0
        row = self._row(y)
        if row is None:
            self.painted(y, None)
            return Strip.blank(width, self.visual_style.rich_style)
        line = Text(no_wrap=True, overflow="crop")
        line.append_text(row)
        # a rank row's last cell is its sample's age, the only part that moves on an idle server
        strip = self._strips.strip(self, y, line, width, tail=self._tail)
        self.painted(y, strip)
        return strip

    def _row(self, y: int) -> Text | None:
        snap = self._snapshot
        if snap is None:
            return Text("waiting for the first sample…", style=self._style("unknown")) if y == 0 else None
        rows = self._rows_for(snap)
        names = self._names
        if y == 0:
            if snap.state.device == "cpu":
                return self._cpu_heading(*self._columns(names))
            return self._heading(*self._columns(names))
        label_w, bar_w, used_w, head_w, util_w, age_w = self._columns(names)
        if not rows:
            if y == 1:
                return Text("no ranks yet: the log has not named any", style=self._style("unknown"))
            first_host = 2
        else:
            if y <= len(rows):
                row = rows[y - 1]
                if isinstance(row, NodeHeading):
                    return self._node_heading(row)
                rank = snap.state.ranks.get(row) or RankMemory(rank=row)
                if snap.state.device == "cpu":
                    return self._cpu_rank_row(rank, label_w, bar_w, used_w, head_w)
                return self._rank_row(snap, rank, self._position[row], label_w, bar_w, used_w, head_w, util_w, age_w)
            first_host = 1 + len(rows)
        hosts = snap.hosts or ()
        if 0 <= y - first_host < len(hosts):
            return self._host_row(snap, hosts[y - first_host], label_w, bar_w)
        return None

    def _node_heading(self, heading: NodeHeading) -> Text:
        """A node's line: its state in the severity's colour when its server ended unasked."""
        t = Text(no_wrap=True)
        for i, part in enumerate(node_heading_parts(heading)):
            if i:
                t.append(" · ", style=self._style("node"))
            ended = i == 3 and part in ("died", "exited")
            t.append(part, style=self._style("bad" if ended else "node"))
        return t

    def _columns(self, names: list[str]) -> tuple[int, int, int, int, int, int]:
        width = max(20, self.size.width)
        label_w = max([4, *(len(n) for n in names)])
        # Fixed columns: label, used/total, after-capture free, GPU %, age; the bar takes the rest
        # (80 columns leave it ~35 cells). GPU % goes only under 72 columns, where the bar would
        # shrink below a readable length.
        used_w, head_w, util_w, age_w = 14, 13 if width >= 120 else 10, 0 if width < 72 else 5, 6
        bar_w = max(8, width - label_w - used_w - head_w - util_w - age_w - 5)
        return label_w, bar_w, used_w, head_w, util_w, age_w

    def _heading(self, label_w: int, bar_w: int, used_w: int, head_w: int, util_w: int, age_w: int) -> Text:
        h = self._style("heading")
        t = Text(no_wrap=True)
        t.append("RANK".ljust(label_w) + " ", style=h)
        legend = Text()
        long = (("weights", "weights"), ("kv", "KV"), ("graphs", "graphs"), ("other", "other"), ("foreign", "foreign"), ("free", "free"))
        short = (("weights", "wts"), ("kv", "KV"), ("graphs", "gr"), ("other", "oth"), ("foreign", "frgn"), ("free", "free"))
        words: tuple[tuple[str, str], ...] = long if sum(len(w) + 2 for _k, w in long) <= bar_w else short
        # every glyph keeps its word; when even the short words do not fit, the ones in the
        # middle go first (free is what an operator looks for, weights what fills the bar)
        while len(words) > 2 and sum(len(w) + 2 for _k, w in words) > bar_w:
            words = (*words[: len(words) - 2], words[-1])
        for key, word in words:
            if legend.cell_len + len(word) + 2 > bar_w:
                break  # only whole legend entries
            legend.append(GLYPHS[key], style=self._style(key))
            legend.append(f"{word} ", style=h)
        legend.pad_right(bar_w - legend.cell_len)
        t.append_text(legend)
        t.append(" " + "USED/TOTAL".rjust(used_w), style=h)
        t.append(" " + ("AFTER CAPTURE" if head_w >= 13 else "@CAPTURE").rjust(head_w), style=h)
        if util_w:
            t.append(" " + "GPU".rjust(util_w - 1), style=h)
        t.append(" " + "AGE".rjust(age_w), style=h)
        return t

    def _cpu_heading(self, label_w: int, bar_w: int, used_w: int, head_w: int, util_w: int, age_w: int) -> Text:
        h = self._style("heading")
        t = Text(no_wrap=True)
        t.append("RANK".ljust(label_w) + " ", style=h)
        legend = Text()
        legend.append(GLYPHS["kv"], style=self._style("kv"))
        legend.append("KV cache of the node's memory · CPU engine, no GPU ", style=h)
        legend.truncate(bar_w)
        legend.pad_right(bar_w - legend.cell_len)
        t.append_text(legend)
        t.append(" " + "KV/NODE".rjust(used_w), style=h)
        t.append(" " + ("KV TOKENS" if head_w >= 10 else "TOKENS").rjust(head_w), style=h)
        return t

    def _cpu_rank_row(self, rank: RankMemory, label_w: int, bar_w: int, used_w: int, head_w: int) -> Text:
        """A CPU engine's rank: the KV cache it printed (`… set (KV/NODE) GiB for KV cache`, `CPU KV
        cache size: N tokens`); not sized yet says so."""
        t = Text(no_wrap=True)
        label_style = self._style("focused") if rank.rank == self._focus_rank else self._style("label")
        t.append(rank.rank.ljust(label_w) + " ", style=label_style)
        node = rank.figures.get("node_memory_gb")
        if rank.kv_gb is None:
            words = " KV cache not sized yet "
            t.append(("·" + words).ljust(bar_w, "·")[:bar_w], style=self._style("unknown"))
        elif node:
            cells = min(bar_w, max(1, round(rank.kv_gb / node * bar_w)))
            t.append(GLYPHS["kv"] * cells, style=self._style("kv"))
            t.append(GLYPHS["free"] * (bar_w - cells), style=self._style("free"))
        else:
            t.append(GLYPHS["kv"] * bar_w, style=self._style("kv"))
        kv = f"{fmt.gb(rank.kv_gb)}/{fmt.gb(node)} GiB" if rank.kv_gb is not None else "not sized"
        t.append(" " + kv.rjust(used_w), style=Style() if rank.kv_gb is not None else self._style("unknown"))
        tokens = f"{rank.kv_tokens:,}" if rank.kv_tokens is not None else "?"
        t.append(" " + tokens.rjust(head_w))
        return t

    def _rank_row(
        self,
        snap: RunSnapshot,
        rank: RankMemory,
        position: int,
        label_w: int,
        bar_w: int,
        used_w: int,
        head_w: int,
        util_w: int,
        age_w: int,
    ) -> Text:
        gpu = gpu_for_rank(snap, rank.rank, position)
        t = Text(no_wrap=True)
        label_style = self._style("focused") if rank.rank == self._focus_rank else self._style("label")
        t.append(rank.rank.ljust(label_w) + " ", style=label_style)
        used = gpu.used_gb if gpu else None
        total = gpu.total_gb if gpu else None
        age = (self._now - gpu.sampled_at) if gpu else None
        stale = age is None or age > STALE_AFTER_S
        t.append_text(self._bar(snap, rank, gpu, bar_w, stale=gpu is not None and stale))
        num_style = self._style("stale") if stale else Style()
        t.append(" " + f"{fmt.gb(used, 1)}/{fmt.gb(total, 1)} GiB".rjust(used_w), style=num_style)
        t.append(" ")
        t.append_text(self._headroom(rank.avail_after_capture_gb, head_w, snap.ended))
        if util_w:
            util = "?" if gpu is None or gpu.util_pct is None else f"{gpu.util_pct:.0f}%"
            t.append(" " + util.rjust(util_w - 1), style=num_style)
        age_cell = " " + fmt.sample_age(age).rjust(age_w)
        t.append(age_cell, style=num_style)
        self._tail = len(age_cell)  # render_line converts it apart from the rest of the row
        return t

    def _headroom(self, headroom: float | None, width: int, ended: bool = False) -> Text:
        if headroom is None:
            return Text("?".rjust(width), style=self._style("unknown"))
        if ended:  # the figure of the run that ended: kept for reading, greyed, no policy dot
            return Text(f"{headroom:.2f} GiB  ".rjust(width), style=self._style("stale"))
        if headroom >= self._policy.target_headroom_gb:
            key = "ok"
        elif headroom >= self._policy.warn_headroom_gb:
            key = "warn"
        else:
            key = "bad"
        return Text(f"{headroom:.2f} GiB ●".rjust(width), style=self._style(key))

    def _bar(self, snap: RunSnapshot, rank: RankMemory, gpu: GpuSample | None, width: int, stale: bool = False) -> Text:
        total = gpu.total_gb if gpu else None
        used = gpu.used_gb if gpu else None
        weights = rank.weights_gb or 0.0
        if rank.weights_gb is None and rank.pre_load_avail_gb is not None and total and used is not None:
            # Weights are loading: what the GPU gained since `Load weight begin` is weights so far.
            weights = max(0.0, used - (total - rank.pre_load_avail_gb))
        kv = rank.kv_gb or 0.0
        graphs = rank.graph_gb or 0.0
        named = weights + kv + graphs
        foreign = foreign_gb(snap, gpu) or 0.0
        scale = total
        if scale is None:
            # Telemetry cannot see this GPU: draw what the log says against what it saw free at start.
            scale = rank.pre_load_avail_gb
        if not scale:
            t = Text("·" * width, style=self._style("unknown"))
            label = " unknown "
            if width > len(label) + 2:
                t = Text("·" * 1 + label + "·" * (width - len(label) - 1), style=self._style("unknown"))
            return t
        if used is not None:
            # the telemetry's used memory is the bar's length; the log's breakdown divides it
            room = max(0.0, used - foreign)
            weights = min(weights, room)
            kv = min(kv, room - weights)
            graphs = min(graphs, room - weights - kv)
            named = weights + kv + graphs
        other = max(0.0, used - named - foreign) if used is not None else 0.0
        parts = [("weights", weights), ("kv", kv), ("graphs", graphs), ("other", other), ("foreign", foreign)]
        cells: list[tuple[str, int]] = []
        acc = 0.0
        drawn = 0
        for key, amount in parts:
            acc += amount
            end = min(width, round(acc / scale * width))
            if end > drawn:
                cells.append((key, end - drawn))
                drawn = end
        if used and not cells:
            # a little memory (a CUDA context while loading: 0.5 of 95 GiB) is still one cell
            cells.append(("other", 1))
            drawn = 1
        t = Text(no_wrap=True)
        for key, n in cells:
            t.append(GLYPHS[key] * n, style=self._style("stale" if stale else key))
        if drawn < width:
            key = "free" if used is not None else "unknown"
            t.append((GLYPHS["free"] if used is not None else "·") * (width - drawn), style=self._style(key))
        return t

    def _host_row(self, snap: RunSnapshot, host: HostSample, label_w: int, bar_w: int) -> Text:
        if snap.state.device == "cpu":
            return self._cpu_host_row(host, label_w, bar_w)
        t = Text(no_wrap=True)
        t.append("HOST".ljust(label_w) + " ", style=self._style("label"))
        total, avail = host.mem_total_gb, host.mem_available_gb
        ranks_here = [r for r, (h, _i) in snap.rank_gpu.items() if h == host.host] or list(snap.state.ranks)
        per_rank = self._host_cache_gb_per_rank
        if per_rank is None:
            per_rank = snap.state.host_cache_gb_per_rank
        cached = per_rank * len(ranks_here) if per_rank is not None and ranks_here else None
        width = max(8, min(bar_w, 40))
        if total:
            used = total - avail if avail is not None else None
            hc_cells = min(width, round((cached or 0.0) / total * width))
            used_cells = min(width, round(used / total * width)) if used is not None else 0
            other_cells = max(0, used_cells - hc_cells)
            t.append(GLYPHS["kv"] * hc_cells, style=self._style("host-cache"))
            t.append(GLYPHS["other"] * other_cells, style=self._style("other"))
            t.append(GLYPHS["free"] * (width - hc_cells - other_cells), style=self._style("free"))
            t.append(f" {host.host} {fmt.gb(used, 0)}/{total:.0f} GB RAM used")
        else:
            t.append("·" * width, style=self._style("unknown"))
            t.append(f" {host.host} RAM unknown", style=self._style("unknown"))
        label = self._host_cache_label or "host cache"  # the engine's name for it; the concept's otherwise
        if per_rank is not None and ranks_here:
            of = f" of {total:.0f} GB" if total else ""
            t.append(f" · {label} {len(ranks_here)} × {per_rank:g} = {cached:g} GB{of}", style=self._style("host-cache"))
        elif self._host_cache_label is not None:  # an engine without one is not said to have it off
            t.append(f" · {label} off")
        age = self._now - host.sampled_at
        if age > STALE_AFTER_S:
            t.append(f" · {fmt.short_duration(age)} old", style=self._style("stale"))
        return t

    def _cpu_host_row(self, host: HostSample, label_w: int, bar_w: int) -> Text:
        """The host of a CPU engine: its RAM holds the weights and the KV cache; in GiB, as vLLM
        prints its memory (the telemetry's figures are decimal GB)."""
        t = Text(no_wrap=True)
        t.append("HOST".ljust(label_w) + " ", style=self._style("label"))
        to_gib = 1e9 / 2**30
        total = host.mem_total_gb * to_gib if host.mem_total_gb else None
        used = total - host.mem_available_gb * to_gib if total and host.mem_available_gb is not None else None
        width = max(8, min(bar_w, 40))
        if total and used is not None:
            cells = min(width, round(used / total * width))
            t.append(GLYPHS["other"] * cells, style=self._style("other"))
            t.append(GLYPHS["free"] * (width - cells), style=self._style("free"))
            t.append(f" {host.host} RAM {used:.1f}/{total:.1f} GiB used (holds the engine's KV cache)")
        else:
            t.append("·" * width, style=self._style("unknown"))
            t.append(f" {host.host} RAM unknown", style=self._style("unknown"))
        age = self._now - host.sampled_at
        if age > STALE_AFTER_S:
            t.append(f" · {fmt.short_duration(age)} old", style=self._style("stale"))
        return t
