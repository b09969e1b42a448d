"""`cockpit tune PROFILE [--objective throughput|ttft-p99] [--slo ttft_p99=2s,itl_p99=100ms]
[--max-launches N] [--json]`: guided tuning without a crash on the way.

Each step walks the gate with the next setting and launches what it lets through (through the
supervisor, as `cockpit up`: a step the gate refuses is recorded as `refused`, costs no launch and
ends the session, its findings naming the fix),
waits for READY, reads the real headroom after graph capture, runs `cockpit bench`'s load, stops
the run and asks the backend's tuning policy for the next setting. The first setting is the memory
plan's recommendation when a plan can be made; a setting predicted below the warn headroom is never
launched (recorded as skipped-by-prediction). A crash is diagnosed and the diagnosis' change is
the next launch. Every step is a journal run tagged with the session; Ctrl-C or the launch budget
keeps the best setting so far. The best is written as a new profile, NAME.tuned.yaml, with the
table of steps in its header.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import stat
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from cockpit.commands._benching import bench_live, spec_from_args
from cockpit.commands._support import load_profile_arg, open_journal, run_command
from cockpit.face import (
    NAME_RE,
    BadInput,
    CockpitError,
    GateRefused,
    Profile,
    ProfileError,
    Supervisor,
    get_backend,
    is_secret_name,
    mask_mapping,
    plan_for_profile,
    read_profile_yaml,
    resolve_profile,
    sort_findings,
    unavailable,
)

OBJECTIVES = ("throughput", "ttft-p99")
SLO_KEYS = ("ttft_p99", "itl_p99")


def parse_slo(text: str | None) -> dict[str, float]:
    """`ttft_p99=2s,itl_p99=100ms` → {"ttft_p99": 2000.0, "itl_p99": 100.0} (milliseconds)."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        key, _, value = part.partition("=")
        key = key.strip()
        if key not in SLO_KEYS or not value:
            raise BadInput(f"--slo {part!r}: expected KEY=VALUE with KEY one of {', '.join(SLO_KEYS)}",
                           hint="for example --slo ttft_p99=2s,itl_p99=100ms")
        v = value.strip().lower()
        scale = 1.0
        if v.endswith("ms"):
            v = v[:-2]
        elif v.endswith("s"):
            v, scale = v[:-1], 1000.0
        try:
            ms = float(v) * scale
        except ValueError:
            raise BadInput(f"--slo {part!r}: {value!r} is not a duration (2s, 100ms)") from None
        if not ms > 0:
            raise BadInput(f"--slo {part!r}: must be more than 0")
        out[key] = ms
    return out


def run(args: argparse.Namespace) -> int:

    profile = load_profile_arg(args.profile)
    if args.objective not in OBJECTIVES:
        raise BadInput(f"--objective {args.objective!r}: allowed values are {', '.join(OBJECTIVES)}")
    slo = parse_slo(args.slo)
    if args.max_launches < 1:
        raise BadInput(f"--max-launches must be at least 1 (got {args.max_launches})")
    tuner_of = get_backend(profile.backend).tuner
    if tuner_of is None:  # said before any launch or check
        raise unavailable(get_backend(profile.backend), "tuner")
    policy = tuner_of.policy()
    spec, levels = spec_from_args(args, profile.backend)
    tuner = Tuner(profile, policy, spec, levels[-1], args, slo)
    tuner.check_output()  # before the first launch: a session's result must have somewhere to go
    return run_command(tuner.tune())


TUNED_SUFFIX = "-tuned"


def tuned_name(name: str) -> str:
    """The tuned profile's name: NAME-tuned, cut so that it still loads (a name is at most 100)."""
    full = name + TUNED_SUFFIX
    if NAME_RE.fullmatch(full):
        return full
    return name[: 100 - len(TUNED_SUFFIX)] + TUNED_SUFFIX


def holds_secrets(data: dict[str, Any]) -> bool:
    """True when the profile text has a value Cockpit masks (env HF_TOKEN, server api-key, …)."""
    sections = [data.get("env"), data.get("server")]
    return any(isinstance(sec, dict) and any(is_secret_name(k) and v not in (None, "", False) for k, v in sec.items())
               for sec in sections)


def write_new_file(out: Path, text: str, *, private: bool, replace_existing: bool,
                   source_mode: int | None = None) -> None:
    """`text` as `out`, never through a link and never half-written: a temp file of a fresh random
    name beside it (O_CREAT|O_EXCL, so a planted NAME.tuned.tmp or link is never opened), 0600 when
    `private` (else the umask's usual mode), then linked to `out` (refused with FileExistsError when
    it exists) or, with `replace_existing`, renamed over it (a link there is replaced, not followed).

    `source_mode`: the mode of the file `text` was made from; the new file gets no permission bit
    the source lacks. A profile holds secrets no name rule can find (a token under any env name, a
    password inside a URL, a webhook's address in `notify`): its owner's 0600 is the only sure sign."""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        mask = os.umask(0)
        os.umask(mask)
        mode = 0o666 & ~mask
        if private:
            mode &= 0o600
        if source_mode is not None:
            mode &= stat.S_IMODE(source_mode)
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if replace_existing:
            os.replace(tmp, out)
        else:
            os.link(tmp, out)  # atomic and no-clobber: EEXIST when `out` appeared meanwhile
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) else None


class Tuner:
    def __init__(self, profile: Profile, policy: Any, spec: Any, concurrency: int, args: argparse.Namespace,
                 slo: dict[str, float]):
        self.profile = profile
        self.policy = policy
        self.spec = spec
        self.spec.concurrency = concurrency
        self.args = args
        self.slo = slo
        self.objective = args.objective
        self.target = profile.policy.target_headroom_gb
        self.warn = profile.policy.warn_headroom_gb
        self.session = "tune-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{os.getpid() % 10000:04d}"
        self.steps: list[Any] = []
        self.launches = 0
        self.crashes = 0
        self.advice_applied = 0
        self.interrupted = False
        self.prior: dict[str, Any] = {}
        self.say = (lambda m: print(m, file=sys.stderr)) if args.json else print

    # ---- the loop ----
    async def tune(self) -> int:
        probe = Supervisor(self.profile)
        try:
            live = await probe.attach()
        finally:
            await probe.close()
        if live is not None:
            raise CockpitError(f"{self.profile.name} is running (run {live.id}); tuning launches its own runs",
                               hint=f"`cockpit down {self.profile.name}` first")
        journal = open_journal()
        base = dict(self.profile.server)
        watching = self._catch_ctrl_c()
        try:
            move = await self.first_move(base)
            while move is not None and self.launches < self.args.max_launches:
                self._stop_if_interrupted()
                if move.predicted_headroom_gb is not None and move.predicted_headroom_gb < self.warn:
                    self.record(self.policy.Step({**base, **move.overrides}, "skipped-by-prediction",
                                                 predicted_headroom_gb=move.predicted_headroom_gb, why=move.why))
                    break
                step = await self.launch(move, journal)
                self.record(step)
                if step.outcome == "refused":  # the gate's findings name the fix: the operator's to make
                    break
                if step.outcome == "crashed":
                    move = self.advice_move(step, base)
                else:
                    move = self.policy.next_move(self.steps, base, target=self.target, warn=self.warn)
        except asyncio.CancelledError:
            self.interrupted = True
        finally:
            if watching:
                asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
            if journal is not None:
                journal.close()
        return self.finish()

    def _catch_ctrl_c(self) -> bool:
        """Ctrl-C stops the session: the flag is set and the loop's task cancelled. The flag is what
        counts: a cancellation can be lost in a race inside an await (Python 3.11's `wait_for`
        drops one that lands as its inner call completes), and on a busy machine the tuner then
        went on to bench and record the launch it had been told to stop (CI saw it)."""
        task = asyncio.current_task()
        if task is None:
            return False

        def on_ctrl_c() -> None:
            self.interrupted = True
            task.cancel()

        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, on_ctrl_c)
        except (NotImplementedError, RuntimeError, ValueError):
            return False  # not the main thread, or no signals here: asyncio's own handler stays
        return True

    def _stop_if_interrupted(self) -> None:
        if self.interrupted:
            raise asyncio.CancelledError

    def record(self, step: Any) -> None:
        self.steps.append(step)
        h = "—" if step.headroom_gb is None else f"{step.headroom_gb:.2f} GiB"
        tps = "not benched" if step.output_tok_s is None else f"{step.output_tok_s:,.0f} tok/s"
        self.say(f"step {len(self.steps)}: {self.flag_words(step.flags)} → {step.outcome}, headroom {h}, {tps}"
                 + (f" ({step.why})" if step.why else ""))

    def flag_words(self, flags: dict[str, Any]) -> str:
        keys = [k for k in sorted(flags) if flags.get(k) != self.profile.server.get(k)] \
            or [self.policy.MEMORY_FLAG]
        return ", ".join(f"--{k} {flags.get(k, 'default')}" for k in keys)

    async def first_move(self, base: dict[str, Any]) -> Any:
        """The memory plan's recommendation when a plan can be made, else the profile as it is (a
        measurement launch: not benched if its headroom turns out below the warn level)."""
        try:
            mp = await plan_for_profile(self.profile)
        except Exception as exc:  # an unreadable model or unknown GPUs: the plan is advice, not a gate
            self.prior = {"source": "profile", "reason": f"memory plan not made: {exc}"}
            return self.policy.Move({}, f"the profile as written (memory plan not made: {exc})", None)
        rec = mp.recommended
        if rec is None:
            self.prior = {"source": "plan", "reason": "the plan found no value that keeps the target"}
            return None
        flag = rec.flag.lstrip("-")
        self.prior = {"source": "plan", "flag": flag, "value": rec.value,
                      "predicted_headroom_gb": round(rec.headroom_after_capture_gib, 2),
                      "calibrated_from": mp.calibrated_from}
        over = {flag: rec.value} if base.get(flag) != rec.value else {}
        return self.policy.Move(over, "the memory plan's recommendation", rec.headroom_after_capture_gib)

    def advice_move(self, step: Any, base: dict[str, Any]) -> Any:
        if not step.advice:
            return None
        self.advice_applied += 1
        flags = {**step.flags, **step.advice}
        over = {k: v for k, v in flags.items() if base.get(k) != v}
        pred = step.predicted_headroom_gb
        return self.policy.Move(over, "the crash diagnosis' change: " + ", ".join(
            f"--{k} {step.flags.get(k)} → {v}" for k, v in step.advice.items()), pred)

    async def launch(self, move: Any, journal: Any) -> Any:

        sup = Supervisor(self.profile, journal=journal)
        # each step through the gate, as `cockpit up`: a refused one is recorded and costs no launch
        try:
            go = await sup.gated(dict(move.overrides))
        except GateRefused as refused:
            await sup.close()
            return self.refused_step(move, refused)
        self.launches += 1
        t0 = time.monotonic()
        self.say(f"launch {self.launches}/{self.args.max_launches}: {move.why}")
        info = await sup.start(go, attach=False)
        if journal is not None:
            try:
                journal.tag_tune_session(info.id, self.session)
            except CockpitError:
                pass
        runner = asyncio.create_task(sup.run())
        bench: dict[str, Any] | None = None
        launch_s = bench_s = 0.0
        snap = sup.snapshot()
        try:
            self._stop_if_interrupted()

            def settled(s: Any) -> bool:
                return bool(s.is_ready() or s.state_phase in ("crashed", "stopped") or s.any_exited)

            await sup.wait_until(settled, self.args.timeout)
            self._stop_if_interrupted()
            launch_s = time.monotonic() - t0
            if not sup.is_ready():
                # a crash: let the server's exit and the rest of its traceback reach the state
                await sup.wait_until(lambda s: bool(s.any_exited), 5.0)
                await asyncio.sleep(1.0)
            snap = sup.snapshot()
            headroom = self._headroom(snap.state)
            if sup.is_ready() and headroom is not None and headroom >= self.warn:
                t1 = time.monotonic()
                try:
                    bench = await bench_live(sup, replace(self.spec), [self.spec.concurrency], journal=journal)
                except CockpitError as exc:
                    self.say(f"  bench not run: {exc}")
                self._stop_if_interrupted()
                bench_s = time.monotonic() - t1
                await asyncio.sleep(1.0)  # let a crash the load caused reach the state
            elif sup.is_ready():
                self.say(f"  headroom {headroom} GiB is below the warn level {self.warn:g} GiB: not benched "
                         "(a large prefill would run out of memory); stopping it")
            snap = sup.snapshot()
        finally:
            crashed = snap.state.phase == "crashed"
            was_ready = snap.state.phase == "ready"
            try:
                await sup.stop(timeout=10, by="cockpit")
                if crashed:
                    snap = sup.snapshot()  # the crash as the whole log tells it
            finally:
                await sup.close()
                runner.cancel()
                await asyncio.gather(runner, return_exceptions=True)
        step = self.step_from(snap, info.id, move, bench, crashed, was_ready)
        return replace(step, why=move.why, launch_s=round(launch_s, 2), bench_s=round(bench_s, 2))

    def refused_step(self, move: Any, refused: Any) -> Any:
        """A step the gate refused (a HiCache size the host cannot hold, …): never launched; why
        names the finding, its arithmetic and its change."""
        f = refused.findings[0] if refused.findings else None
        words = f"refused by preflight: {f.id}: {f.message}" if f is not None else "refused by preflight"
        if f is not None and f.changes:
            words += " (change: " + ", ".join(c.as_diff() for c in f.changes) + ")"
        return self.policy.Step({**self.profile.server, **move.overrides}, "refused",
                                predicted_headroom_gb=move.predicted_headroom_gb, why=f"{move.why}; {words}")

    @staticmethod
    def _headroom(state: Any) -> float | None:
        vals = [r.avail_after_capture_gb for r in state.ranks.values() if r.avail_after_capture_gb is not None]
        return min(vals) if vals else None

    def step_from(self, snap: Any, run_id: str, move: Any, bench: dict[str, Any] | None, crashed: bool,
                  was_ready: bool) -> Any:

        st = snap.state
        ranks = list(st.ranks.values())
        kv_gb = [r.kv_gb for r in ranks if r.kv_gb is not None]
        flags = dict(snap.run.flags) if snap.run is not None else {**self.profile.server, **move.overrides}
        advice: dict[str, Any] = {}
        predicted = None
        crash_kind = None
        if crashed:
            crash_kind = st.crash.kind if st.crash is not None else "unknown"
            # every critical finding's change at once (a port in use and a low headroom are two
            # launches otherwise); the most severe finding's value wins a flag both name
            found = [f for f in sort_findings(list(snap.findings)) if f.changes]
            for f in [f for f in found if f.severity == "critical"] or found[:1]:
                for c in f.changes:
                    advice.setdefault(c.flag.lstrip("-"), c.to_value)
                if predicted is None:
                    predicted = _num((f.predicted or {}).get("headroom_gb"))
        srv = (bench or {}).get("server") or {}
        # the engine's own fields of a step (its flags, its defaults): the policy's step_facts
        facts = getattr(self.policy, "step_facts", None)
        engine = facts(st, flags) if facts is not None else {}
        return self.policy.Step(
            flags=flags,
            outcome="crashed" if crashed else ("ready" if was_ready or bench else st.phase),
            headroom_gb=self._headroom(st),
            kv_tokens=st.max_total_num_tokens,
            kv_gb=min(kv_gb) if kv_gb else None,
            concurrency=self.spec.concurrency,
            output_tok_s=None if bench is None or not bench.get("requests") else _num(bench.get("output_tok_s")),
            ttft_p99_ms=_num(((bench or {}).get("ttft_ms") or {}).get("p99")),
            itl_p99_ms=_num(((bench or {}).get("itl_ms") or {}).get("p99")),
            # the second half's means: the first seconds' burst of prefills queues every request
            peak_running=_num(srv.get("steady_running", srv.get("peak_running"))),
            peak_queue=_num(srv.get("steady_waiting", srv.get("peak_waiting"))),
            peak_token_usage=_num(srv.get("steady_kv_usage", srv.get("peak_kv_usage"))),
            crash_kind=crash_kind,
            advice=advice,
            predicted_headroom_gb=predicted if crashed else move.predicted_headroom_gb,
            run_id=run_id,
            version=(st.format or "").rpartition("-")[2] or None,
            **engine,
        )

    # ---- the result ----
    def finish(self) -> int:
        crashes = sum(1 for s in self.steps if s.outcome == "crashed")
        best = self.policy.best_step(self.steps, self.objective, self.slo, self.target)
        written = self.write_profile(best) if best is not None else None
        out = {
            "session": self.session,
            "objective": self.objective,
            "slo_ms": self.slo,
            "prior": self.prior,
            "steps": [self.step_json(s) for s in self.steps],
            "best": None if best is None else {"flags": mask_mapping(best.flags), "output_tok_s": best.output_tok_s,
                                               "headroom_gb": best.headroom_gb, "run_id": best.run_id,
                                               "ttft_p99_ms": best.ttft_p99_ms},
            "launches": self.launches,
            "crashes": crashes,
            "advice_applied": self.advice_applied,
            "interrupted": self.interrupted,
            "profile_written": written,
        }
        if self.args.json:
            print(json.dumps(out, indent=2))
        else:
            print(self.render(out, best))
        return 0 if best is not None else 1

    @staticmethod
    def step_json(s: Any) -> dict[str, Any]:
        d = asdict(s)
        d["flags"] = mask_mapping(d["flags"])  # `tune --json` never prints the key (the profile has it)
        head = {k: d.pop(k) for k in ("run_id", "flags", "outcome", "headroom_gb", "output_tok_s")}
        return {**head, **d}

    def table(self) -> list[str]:
        rows = [f"{'#':>2} {'run':<22} {'outcome':<22} {'headroom':>9} {'tok/s':>9}  setting"]
        for i, s in enumerate(self.steps, 1):
            h = "—" if s.headroom_gb is None else f"{s.headroom_gb:.2f}"
            t = "—" if s.output_tok_s is None else f"{s.output_tok_s:,.0f}"
            rows.append(f"{i:>2} {s.run_id or '—':<22} {s.outcome:<22} {h:>9} {t:>9}  {self.flag_words(s.flags)}")
        return rows

    def render(self, out: dict[str, Any], best: Any) -> str:
        lines = [f"{self.profile.name}: tuning session {self.session} ({self.objective}, target headroom "
                 f"{self.target:g} GiB, warn {self.warn:g} GiB)", *self.table()]
        lines.append(f"launches {out['launches']}, crashes {out['crashes']}"
                     + (", interrupted: the best so far is kept" if self.interrupted else ""))
        if best is None:
            lines.append("no step kept the headroom target with a measured result: nothing written")
        else:
            lines.append(f"best: {self.flag_words(best.flags)} — {best.output_tok_s:,.0f} tok/s, "
                         f"headroom {best.headroom_gb:.2f} GiB (run {best.run_id})")
            lines.append(f"written: {out['profile_written']}")
        return "\n".join(lines)

    def output_path(self) -> Path:
        if self.args.output:
            return Path(self.args.output)
        out = resolve_profile(self.args.profile).with_name(f"{self.profile.name}.tuned.yaml")
        if not os.access(out.parent, os.W_OK):
            out = Path("profiles") / out.name
        return out

    def check_output(self) -> None:
        """Refuse before any launch when the default NAME.tuned.yaml exists: an earlier session's
        result is never overwritten silently (`--output PATH` names another file, or that one)."""
        out = self.output_path()
        if not self.args.output and os.path.lexists(out):
            raise BadInput(f"{out} exists already (an earlier tuning session's result?): tune would overwrite it",
                           hint="move it aside, or pass --output PATH for this session's profile")

    def write_profile(self, best: Any) -> str | None:
        import yaml


        src = resolve_profile(self.args.profile)
        try:
            source_mode = src.stat().st_mode  # what is written is no more readable than the source
            data = read_profile_yaml(src)  # the loader's guards (an alias bomb put there meanwhile)
        except (OSError, ProfileError) as exc:
            self.say(f"cockpit: the tuned profile was not written: cannot read {src}: {exc}")
            return None
        data["name"] = tuned_name(self.profile.name)
        data["server"] = dict(best.flags)
        try:
            Profile.model_validate(data)  # what is written must load
        except ValueError as exc:
            self.say(f"cockpit: the tuned profile was not written: it would not load: {exc}")
            return None
        out = self.output_path()
        header = [f"# Tuned by `cockpit tune` (session {self.session}, objective {self.objective}) from {src}.",
                  f"# Best: run {best.run_id}, {best.output_tok_s:,.0f} tok/s, headroom {best.headroom_gb:.2f} GiB "
                  f"(target {self.target:g}).", "# Steps:"]
        header += ["#   " + row for row in self.table()]
        text = "\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=False)
        private = holds_secrets(data)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            try:
                write_new_file(out, text, private=private, replace_existing=bool(self.args.output),
                               source_mode=source_mode)
            except FileExistsError:  # NAME.tuned.yaml appeared during the session: keep both
                taken, out = out, out.with_name(f"{self.profile.name}.tuned.{self.session}.yaml")
                write_new_file(out, text, private=private, replace_existing=False, source_mode=source_mode)
                self.say(f"cockpit: {taken} appeared during the session and is kept; this session's profile is {out}")
        except OSError as exc:
            self.say(f"cockpit: the tuned profile was not written to {out}: {exc}")
            return None
        return str(out)
