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
from cockpit.core.serving import ServingWindow, parse_sample
from cockpit.core.state import RunState
from cockpit.supervisor.api import LogLine

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 2.0
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
        self._model: str | None = None

    # ---------------------------------------------------------------- observations
    def lines(self, lines: Sequence[LogLine]) -> None:
        """Every log line: when each rank last spoke (a rank silent while others log)."""
        now = time.monotonic()
        for ln in lines:
            if ln.rank:
                self.watch.log_line(now, f"{ln.host} {ln.rank}" if ln.host and ln.host != "local" else ln.rank)

    async def sample(self, base_url: str) -> bool:
        """One scrape of /metrics into the window and the hang watch (and the log's progress
        lines, which count without /metrics too); False when the scrape failed."""
        from cockpit.serving.probes import metrics_text

        text = await metrics_text(base_url, self.backend.metrics.path())
        now = time.monotonic()
        st = self.state()
        self.watch.progress_lines(now, st.progress_lines)
        if text is None:
            return False
        s = parse_sample(text, self.backend.metrics.prefix(), self.backend.metrics.serving(), now)
        self.window.add(s)
        v = s.values
        tokens = None
        if "generation_tokens" in v or "prompt_tokens" in v:
            tokens = v.get("generation_tokens", 0.0) + v.get("prompt_tokens", 0.0)
        self.watch.tokens(now, tokens)
        self.watch.outstanding(now, _int(v.get("running")), _int(v.get("waiting")))
        self.serving = self.window.figures()
        self.changed()
        return True

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
                if active() and self.state().phase in SERVING_PHASES:
                    try:
                        url = await base_url()
                    except Exception as exc:  # the tunnel is down: the readiness probe says so
                        log.debug("serving watch: %s", exc)
                        url = None
                    if url is not None:
                        await self.sample(url)
                        if (probe is None or probe.done()) and self.watch.wants_probe(
                                time.monotonic(), probe_after_s(self.window_s)):
                            probe = asyncio.create_task(self._probe(url, flags()))
                        self.judge()
                await asyncio.sleep(SAMPLE_INTERVAL_S)
        finally:
            if probe is not None:
                probe.cancel()
                await reap(probe)

    async def check(self, base_url: str, flags: dict[str, Any]) -> None:
        """One bounded look for `cockpit status`: scrape, send the probe, and wait until it is
        answered, tokens move, or the window passes (then the run is hung)."""
        if self.state().phase not in SERVING_PHASES:
            return
        await self.sample(base_url)  # no /metrics (SGLang without --enable-metrics): the probe and the log decide
        probe = asyncio.create_task(self._probe(base_url, flags))
        try:
            deadline = time.monotonic() + self.window_s + 3.0
            moved_at = self.watch.last_movement
            first = True
            while time.monotonic() < deadline:
                # two scrapes at least (the one above and this), half a second apart: a counter rate
                # needs an interval, not a long one; then a second apart until the probe is answered
                # or tokens move (a third scrape, a second later, told nothing more)
                await asyncio.sleep(0.5 if first else 1.0)
                first = False
                await self.sample(base_url)
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
