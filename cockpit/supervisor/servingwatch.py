"""Serving health and hang detection for a ready run: node 0's `/metrics`, read every couple of
seconds, and Cockpit's own one-token probe request when nothing has moved for a while.

The figures are the engine's own (cockpit/core/serving.py windows them); the hang verdict is
cockpit/core/hang.py's. This module does the I/O and folds `HangSeen`/`HangCleared` into the run's
state, so `hung` reaches the header, `status --json`, the journal and the unattended policy the
way every other phase does.

Cockpit's probe is a real request: it shows in the engine's request counters and access log
(one every `probe_after_s` of an idle server, none while tokens move).
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
from cockpit.supervisor.api import LogLine

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 2.0
# what one scrape of `status`'s look may take (a healthy /metrics answers in milliseconds); the
# look's own deadline bounds them all together
STATUS_SCRAPE_S = 5.0
SERVING_PHASES = ("ready", "hung")


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
        self.reset()

    def reset(self) -> None:
        self.window = ServingWindow()
        self.watch = HangWatch(self.window_s)
        self.serving: dict[str, Any] | None = None
        self.timed_out = False  # the last scrape got no answer within its time
        self._model: str | None = None

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
        from cockpit.serving.probes import INFO_TIMEOUT_S, metrics_body

        body, note = await metrics_body(base_url, self.backend.metrics.path(),
                                        timeout=INFO_TIMEOUT_S if timeout is None else timeout)
        now = time.monotonic()
        st = self.state()
        self.watch.progress_lines(now, st.progress_lines)
        self.timed_out = note is not None and body is None and "did not answer" in note
        if body is None:
            self._publish(note)
            return False
        m = self.backend.metrics
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
            figures = {**(figures or {"source": self.backend.metrics.path()}), "note": note}
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
        from cockpit.serving.probes import first_model, probe_generate

        key = api_key_of(self.profile, flags)
        if self._model is None:
            self._model = await first_model(base_url, api_key=key)
            if self._model is None:
                return  # no model listed: nothing to ask (the engine is not serving the API yet)
        self.watch.probe_sent(time.monotonic())
        # long enough to outlast any queue: the verdict comes from the window, not this timeout
        answer = await probe_generate(base_url, self._model, api_key=key, timeout=self.window_s * 10)
        if answer == "ok":
            self.watch.probe_answered(time.monotonic())
        else:
            self.watch.probe_failed()
            if answer.startswith("HTTP 4"):
                self._model = None  # the served name changed (a restart): ask again
        self.judge()

    # ---------------------------------------------------------------- drivers
    async def loop(self, base_url: Callable[[], Any], flags: Callable[[], dict[str, Any]],
                   active: Callable[[], bool]) -> None:
        """While the run serves: scrape, probe when idle, judge."""
        probe: asyncio.Task[None] | None = None
        try:
            while True:
                try:
                    probe = await self._once(base_url, flags, active, probe)
                except Exception:  # one bad look (a body no rule foresaw) must not end the watch for the run
                    log.warning("serving watch: one look failed; going on", exc_info=True)
                await asyncio.sleep(SAMPLE_INTERVAL_S)
        finally:
            if probe is not None:
                probe.cancel()
                await reap(probe)

    async def _once(self, base_url: Callable[[], Any], flags: Callable[[], dict[str, Any]],
                    active: Callable[[], bool], probe: asyncio.Task[None] | None) -> asyncio.Task[None] | None:
        """One iteration of loop(): scrape, send the probe when idle, judge; the probe's task."""
        if not active() or self.state().phase not in SERVING_PHASES:
            return probe
        try:
            url = await base_url()
        except Exception as exc:  # the tunnel is down: the readiness probe says so
            log.debug("serving watch: %s", exc)
            return probe
        await self.sample(url)
        if (probe is None or probe.done()) and self.watch.wants_probe(time.monotonic(), probe_after_s(self.window_s)):
            probe = asyncio.create_task(self._probe_logged(url, flags()))
        self.judge()
        return probe

    async def _probe_logged(self, base_url: str, flags: dict[str, Any]) -> None:
        try:
            await self._probe(base_url, flags)
        except Exception:
            log.warning("serving watch: the probe failed; the next one goes as usual", exc_info=True)

    async def check(self, base_url: str, flags: dict[str, Any]) -> None:
        """One bounded look for `cockpit status`: scrape, send the probe, and wait until it is
        answered, tokens move, or the window passes (then the run is hung)."""
        if self.state().phase not in SERVING_PHASES:
            return
        deadline = time.monotonic() + self.window_s + 3.0  # the one deadline of the whole look

        def left(cap: float) -> float:
            return max(0.1, min(cap, deadline - time.monotonic()))

        # the probe and the first scrape together: a slow /metrics does not hold the probe back
        probe = asyncio.create_task(self._probe_logged(base_url, flags))
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
                self.judge()
                if probe.done() or self.watch.last_movement != moved_at:
                    break
            self.judge()
        finally:
            probe.cancel()
            with contextlib.suppress(Exception):
                await reap(probe)


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)
