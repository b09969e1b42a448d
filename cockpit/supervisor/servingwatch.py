"""Serving health and hang detection for a ready run: node 0's `/metrics`, read every couple of
seconds, and Cockpit's own one-token probe request when nothing has moved for a while.

The figures are the engine's own (cockpit/core/serving.py windows them); the hang verdict is
cockpit/core/hang.py's. This module does the I/O and folds `HangSeen`/`HangCleared` into the run's
state, so `hung` reaches the header, `status --json`, the journal and the unattended policy the
way every other phase does.

Footprint (docs/OPERATIONS.md "Footprint"): every request here is one line in the server's access
log. /metrics is read every SAMPLE_INTERVAL_S only while the server is busy (work outstanding, or
tokens moved in the last BUSY_RECENT_S) or the operator watches the serving figures (the TUI's
throughput panel: `watching`); an idle server's is read ever more slowly, up to every
IDLE_SAMPLE_INTERVAL_S. While /metrics answers, the readiness probe of a ready run is not sent
(`answered_at` vouches for the server's HTTP front end): one request where there were two. The hang
probe is a real request (it shows in the engine's request counters) and goes out only when the
engine's gauges say work is outstanding and nothing moves — never to an idle server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from cockpit.aio import reap
from cockpit.backends.base import Backend
from cockpit.core.events import HangCleared, HangSeen
from cockpit.core.hang import HangWatch, hang_after_s
from cockpit.core.profile import Profile
from cockpit.core.reducer import apply
from cockpit.core.serving import ServingWindow, parse_body
from cockpit.core.state import RunState
from cockpit.serving.probes import INFO_TIMEOUT_S, first_model, metrics_body, probe_generate
from cockpit.supervisor.api import LogLine

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 2.0
# what one scrape of `status`'s look may take (a healthy /metrics answers in milliseconds); the
# look's own deadline bounds them all together
STATUS_SCRAPE_S = 5.0
IDLE_SAMPLE_INTERVAL_S = 30.0  # an idle server's /metrics: twice a minute
BUSY_RECENT_S = 10.0  # tokens moved this recently: the server is busy (full rate)
SERVING_PHASES = ("ready", "hung")


def next_interval(current: float, busy: bool) -> float:
    """The pause before the next /metrics read: the full rate while busy or watched, else twice
    the last pause, up to IDLE_SAMPLE_INTERVAL_S (an idle server settles at two reads a minute)."""
    if busy:
        return SAMPLE_INTERVAL_S
    return min(IDLE_SAMPLE_INTERVAL_S, max(SAMPLE_INTERVAL_S, current * 2))


def probe_after_s(window_s: float) -> float:
    """Probe an idle server a few times per window (at least 2 s apart)."""
    return max(2.0, window_s / 4)


def api_key_of(profile: Profile, flags: dict[str, Any]) -> str | None:
    key = flags.get("api-key") or flags.get("api_key") or profile.env.get("VLLM_API_KEY")
    return str(key) if key else None


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ServingWatch:
    def __init__(self, backend: Backend, profile: Profile, state: Callable[[], RunState],
                 changed: Callable[[], None]) -> None:
        self.backend = backend
        self.profile = profile
        self.state = state  # the run's live state (the fold's)
        self.changed = changed
        self.window_s = hang_after_s(backend.name, profile.policy.hang_after_s)
        # the operator is looking at the serving figures (the TUI's throughput panel): full rate
        self.watching = False
        self.reset()

    def reset(self) -> None:
        self.window = ServingWindow()
        self.watch = HangWatch(self.window_s)
        self.serving: dict[str, Any] | None = None
        self.timed_out = False  # the last scrape got no answer within its time
        self._model: str | None = None
        self.answered_at: float | None = None  # when /metrics last answered (monotonic)
        self.interval = SAMPLE_INTERVAL_S

    def busy(self, now: float) -> bool:
        """Read /metrics at the full rate: watched, work outstanding, a probe waiting, or tokens
        moved a moment ago (a hang needs the full rate to be seen within its window)."""
        w = self.watch
        return (self.watching or bool(w.outstanding_gauge) or bool(w.probes)
                or w.last_movement is None or w.still_for(now) < BUSY_RECENT_S)

    # ---------------------------------------------------------------- observations
    def lines(self, lines: Sequence[LogLine]) -> None:
        """Every log line: when each rank last spoke (a rank silent while others log)."""
        now = time.monotonic()
        for ln in lines:
            if ln.rank:
                self.watch.log_line(now, f"{ln.host} {ln.rank}" if ln.host and ln.host != "local" else ln.rank)

    async def sample(self, base_url: str, timeout: float | None = None) -> bool:
        """One scrape of /metrics into the window and the hang watch (and the log's progress
        lines, which count without /metrics too); False when the scrape failed. The body is
        filtered to the serving table's families and parsed in a thread: a body of a few MiB is
        seconds of parsing, and the event loop (the TUI, the other watches) must not wait on it."""

        m = self.backend.metrics
        now = time.monotonic()
        if m is None:  # an engine without metrics: the log and the probe decide; status says why no figures
            self.watch.progress_lines(now, self.state().progress_lines)
            self._publish(f"serving metrics unavailable for this engine ({self.backend.words().display})")
            return False
        body, note = await metrics_body(base_url, m.path(), timeout=INFO_TIMEOUT_S if timeout is None else timeout)
        now = time.monotonic()
        st = self.state()
        self.watch.progress_lines(now, st.progress_lines)
        self.timed_out = note is not None and body is None and "did not answer" in note
        if body is None:
            self._publish(note)
            return False
        self.answered_at = now
        s = await asyncio.to_thread(parse_body, body, m.prefix(), m.serving(), now)
        self.window.add(s)
        v = s.values
        tokens = None
        if "generation_tokens" in v or "prompt_tokens" in v:
            tokens = v.get("generation_tokens", 0.0) + v.get("prompt_tokens", 0.0)
        self.watch.tokens(now, tokens)
        self.watch.outstanding(now, _int(v.get("running")), _int(v.get("waiting")))
        self._publish(None)
        return True

    def _publish(self, note: str | None) -> None:
        """The figures as `status` and the dashboard show them, with why the last scrape gave
        nothing when it did not (too large, no answer in time): never silently stale."""
        figures = self.window.figures()
        if note is not None:
            m = self.backend.metrics
            figures = {**(figures or {"source": m.path() if m is not None else None}), "note": note}
        self.serving = figures
        self.changed()

    def judge(self) -> None:
        """Fold the verdict into the run's state (hung, or ready again)."""
        st = self.state()
        if st.phase not in SERVING_PHASES:
            return
        verdict = self.watch.verdict(time.monotonic())
        if verdict is not None:
            if st.phase != "hung" or st.hang != verdict:
                apply(st, HangSeen(line=0, ts=now_iso() if st.phase != "hung" else None, rank=None, evidence=verdict))
                self.changed()
        elif st.phase == "hung":
            apply(st, HangCleared(line=0, ts=now_iso(), rank=None))
            self.changed()

    async def _probe(self, base_url: str, flags: dict[str, Any]) -> None:

        key = api_key_of(self.profile, flags)
        if self._model is None:
            self._model = await first_model(base_url, api_key=key)
            if self._model is None:
                return  # no model listed: nothing to ask (the engine is not serving the API yet)
        sent = self.watch.probe_sent(time.monotonic())
        # long enough to outlast any queue: the verdict comes from the window, not this timeout
        answer = await probe_generate(base_url, self._model, api_key=key, timeout=self.window_s * 10)
        if answer == "ok":
            self.watch.probe_answered(time.monotonic())
        else:
            self.watch.probe_failed(sent)
            if answer.startswith("HTTP 4"):
                self._model = None  # the served name changed (a restart): ask again
        self.judge()

    # ---------------------------------------------------------------- drivers
    async def loop(self, base_url: Callable[[], Any], flags: Callable[[], dict[str, Any]],
                   active: Callable[[], bool]) -> None:
        """While the run serves: scrape (at the full rate only while busy or watched), probe when
        the gauges say work is stuck, judge."""
        probes: set[asyncio.Task[None]] = set()
        try:
            while True:
                serving = False
                try:
                    serving = await self._once(base_url, flags, active, probes)
                except Exception:  # one bad look (a body no rule foresaw) must not end the watch for the run
                    log.warning("serving watch: one look failed; going on", exc_info=True)
                self.interval = next_interval(self.interval, not serving or self.busy(time.monotonic()))
                await self._pause(self.interval)
        finally:
            for p in probes:
                p.cancel()
            for p in probes:
                await reap(p)

    async def _once(self, base_url: Callable[[], Any], flags: Callable[[], dict[str, Any]],
                    active: Callable[[], bool], probes: set[asyncio.Task[None]]) -> bool:
        """One look of loop(): scrape, send a probe when the gauges say work is stuck, judge.
        Returns whether the run serves (the pause to the next look depends on it)."""
        serving = bool(active() and self.state().phase in SERVING_PHASES
                       and self.profile.policy.serving_watch)  # `serving-watch: false`: no /metrics
        if not serving:
            return False
        try:
            url = await base_url()
        except Exception as exc:  # the tunnel is down: the readiness probe says so
            log.debug("serving watch: %s", exc)
            return True
        await self.sample(url)
        for p in [p for p in probes if p.done()]:
            probes.discard(p)
        if self.profile.policy.hang_probe and self.watch.wants_probe(time.monotonic(), probe_after_s(self.window_s)):
            probes.add(asyncio.create_task(self._probe_logged(url, flags())))
        self.judge()
        return True

    async def _pause(self, seconds: float) -> None:
        """The wait to the next read, cut short when the operator starts watching the figures."""
        was = self.watching
        left = seconds
        while left > 0:
            step = min(left, SAMPLE_INTERVAL_S / 4)
            await asyncio.sleep(step)
            left -= step
            if self.watching and not was:
                self.interval = SAMPLE_INTERVAL_S
                return

    async def _probe_logged(self, base_url: str, flags: dict[str, Any]) -> None:
        try:
            await self._probe(base_url, flags)
        except Exception:
            log.warning("serving watch: the probe failed; the next one goes as usual", exc_info=True)

    async def check(self, base_url: str, flags: dict[str, Any]) -> None:
        """One bounded look for `cockpit status`: scrape, send the probe, and wait until it is
        answered, tokens move, or the window passes (then the run is hung)."""
        if self.state().phase not in SERVING_PHASES or not self.profile.policy.serving_watch:
            return
        if not self.profile.policy.hang_probe:
            await self.sample(base_url)
            self.judge()
            return
        deadline = time.monotonic() + self.window_s + 3.0  # the one deadline of the whole look

        def left(cap: float) -> float:
            return max(0.1, min(cap, deadline - time.monotonic()))

        # the operator asked: probe whatever the gauges say (the loop never probes an idle server),
        # the probe and the first scrape together (a slow /metrics does not hold the probe back); a
        # second probe once the first has waited a quarter window (`hung` needs two unanswered)
        probe = asyncio.create_task(self._probe_logged(base_url, flags))
        second: asyncio.Task[None] | None = None
        after = probe_after_s(self.window_s)
        try:
            # no /metrics (SGLang without --enable-metrics): the probe and the log decide
            await self.sample(base_url, timeout=left(STATUS_SCRAPE_S))
            moved_at = self.watch.last_movement
            first = True
            while time.monotonic() < deadline:
                # two scrapes at least (the one above and this), half a second apart: a counter rate
                # needs an interval, not a long one; then a second apart until the probe is answered
                # or tokens move (a third scrape, a second later, told nothing more). A /metrics that
                # let one scrape time out is not asked again in this look.
                await asyncio.sleep(0.5 if first else 1.0)
                first = False
                if not self.timed_out:
                    await self.sample(base_url, timeout=left(STATUS_SCRAPE_S))
                if second is None and self.watch.second_probe_due(time.monotonic(), after):
                    second = asyncio.create_task(self._probe_logged(base_url, flags))
                self.judge()
                if probe.done() or self.watch.last_movement != moved_at:
                    break
            self.judge()
        finally:
            for task in (probe, second):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(Exception):
                        await reap(task)


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)
