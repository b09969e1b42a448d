"""Advice that cannot point the wrong way: properties every rule that proposes a
--mem-fraction-static change must hold, over generated memory figures (hypothesis).

- the verb matches the direction (lower ⇒ to < from; raise ⇒ to > from), never the current value;
- the value stays in the flag's domain (0, 1) and, when lowering, above the startup floor 1 − A/P;
- the predicted headroom is f + (from − to)·P within rounding, f the free memory the rule started
  from (after capture; at the start of the capture that failed for a graph-capture OOM);
- the current value is read from every place the log states it (server_args, the decisive line,
  the profile) and, when none does, shown as "unknown" with an absolute proposal;
- every flag in a change or an alternative is spelled as the run's version spells it.
"""

from __future__ import annotations

import re

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cockpit.backends.base import FlagError
from cockpit.backends.sglang.diagnosis import diagnose
from cockpit.backends.sglang.flags import canonical
from cockpit.core.findings import Finding
from cockpit.core.profile import parse_profile
from cockpit.core.state import Crash, RunState

VERSIONS = st.sampled_from(["sglang-0.5.9", "sglang-0.5.23"])
MFS = st.floats(0.3, 0.97).map(lambda x: round(x, 2))
P = st.floats(2.0, 190.0)
FRACTION = st.floats(0.05, 0.95)
SETTINGS = settings(max_examples=150, deadline=None)


def state(fmt: str, mfs: float | None, p: float, weights_frac: float, worst: float, tp: int = 2) -> RunState:
    s = RunState(format=fmt, phase="ready")
    if mfs is not None:
        s.server_args = {"mem_fraction_static": mfs, "tp_size": tp, "chunked_prefill_size": 8192}
    for i in range(tp):
        r = s.rank(f"TP{i}")
        r.pre_load_avail_gb = p
        r.weights_gb = round(p * weights_frac, 2)
        r.after_weights_avail_gb = round(p - r.weights_gb, 2)
        r.avail_before_capture_gb = worst + 1.0
        r.graph_gb = 1.0
        r.avail_after_capture_gb = worst
    return s


def mfs_changes(f: Finding) -> list:
    return [c for c in f.changes if c.flag == "--mem-fraction-static"]


def check_direction(f: Finding) -> None:
    for c in mfs_changes(f):
        assert c.to_value != c.from_value, f.message
        assert 0 < c.to_value < 1, f.message
        lowered = re.search(r"Lower --mem-fraction-static ([\d.]+) → ([\d.]+)", f.message)
        if lowered:
            assert c.from_value is not None and c.to_value < c.from_value, f.message
            assert float(lowered.group(1)) == c.from_value and float(lowered.group(2)) == c.to_value
        if "RAISE" in f.message or "raise --mem-fraction-static" in f.message:
            assert c.from_value is None or c.to_value > c.from_value, f.message
        assert lowered or "RAISE" in f.message or "raise --mem-fraction-static" in f.message, f.message


def check_spelling(f: Finding, fmt: str) -> None:
    version = fmt.removeprefix("sglang-")
    for c in (*f.changes, *f.alternatives):
        try:
            spec = canonical(c.flag, version)
        except FlagError as exc:  # pragma: no cover - the assertion message is the point
            raise AssertionError(f"{c.flag} is not a flag of SGLang {version}: {f.message}") from exc
        assert spec.name == c.flag, (c.flag, spec.name)


@SETTINGS
@given(fmt=VERSIONS, mfs=MFS, p=P, wf=FRACTION, worst=st.floats(0.0, 12.0), crash=st.booleans())
def test_lowering_rules(fmt: str, mfs: float, p: float, wf: float, worst: float, crash: bool) -> None:
    s = state(fmt, mfs, p, wf, worst)
    if crash:
        s.crash = Crash(kind="cuda_oom", phase="prefill", rank="TP0", line=9, message="CUDA out of memory")
    floor = 1 - s.ranks["TP0"].after_weights_avail_gb / p
    for f in diagnose(s):
        check_direction(f)
        check_spelling(f, fmt)
        for c in mfs_changes(f):
            assert c.to_value > floor, (f.message, floor)
            if "headroom_gb" in f.predicted:
                expect = worst + (c.from_value - c.to_value) * p
                assert abs(f.predicted["headroom_gb"] - expect) <= 0.011, (f.predicted, expect)


@SETTINGS
@given(fmt=VERSIONS, mfs=MFS, p=P, wf=FRACTION, first=st.floats(1.0, 30.0), second=st.floats(0.0, 30.0),
       graphs=st.floats(0.1, 6.0))
def test_graph_capture_uses_the_start_of_the_failing_capture(fmt: str, mfs: float, p: float, wf: float,
                                                             first: float, second: float, graphs: float) -> None:
    """0.5.23 captures prefill graphs, then decode graphs: an OOM in the second is sized from the
    free memory when the second began, never from the first's start."""
    s = state(fmt, mfs, p, wf, 0.0)
    for r in s.ranks.values():
        r.avail_after_capture_gb = None
        r.avail_before_capture_gb = first  # Memory pool end / the first capture's start
        r.graph_gb = graphs  # the first capture finished
        r.captures_done = 1
        r.avail_at_capture_begin_gb = second  # the second capture began with this
    s.crash = Crash(kind="graph_capture_oom", phase="graph_capture", rank="TP0", line=9, message="x")
    f = next(f for f in diagnose(s) if f.id == "graph_capture_oom")
    check_direction(f)
    check_spelling(f, fmt)
    assert f"{second:.2f} GiB" in f.message
    for c in mfs_changes(f):
        assert abs(f.predicted["headroom_gb"] - (second + (c.from_value - c.to_value) * p)) <= 0.011


@SETTINGS
@given(fmt=VERSIONS, mfs=st.one_of(st.none(), MFS), p=P, wf=st.floats(0.5, 0.99), where=st.sampled_from(
    ["server_args", "line", "profile", "nowhere"]), sglang_bound=st.booleans())
def test_init_not_enough_memory_raises(fmt: str, mfs: float | None, p: float, wf: float, where: str,
                                       sglang_bound: bool) -> None:
    s = state(fmt, mfs if where == "server_args" else None, p, wf, 0.0)
    for r in s.ranks.values():
        r.avail_before_capture_gb = r.graph_gb = r.avail_after_capture_gb = None
    floor = 1 - s.ranks["TP0"].after_weights_avail_gb / p
    text = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    if where == "line" and mfs is not None:
        text = f"ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={mfs}."
        s.stated_flags["mem_fraction_static"] = mfs  # what the reducer records from that line
    if sglang_bound:
        text += f" Raise --mem-fraction-static above {floor + 0.01:.3f} (minimum viable = 1 - available/pre = {floor:.4f})."
    profile = None
    if where == "profile" and mfs is not None:
        profile = parse_profile({"name": "p", "server": {"mem-fraction-static": mfs}})
    s.crash = Crash(kind="init_not_enough_memory", phase="startup", rank="TP0", line=9, message=text)
    f = next(f for f in diagnose(s, profile) if f.id == "init_not_enough_memory")
    known = mfs if where != "nowhere" else None
    check_spelling(f, fmt)
    for c in mfs_changes(f):
        assert c.from_value == known  # read from wherever the log (or the profile) states it
        assert c.to_value != c.from_value and 0 < c.to_value < 1
        assert c.to_value > floor - 1e-9
        if sglang_bound:
            assert c.to_value > float(f"{floor + 0.01:.3f}")  # strictly above SGLang's own "above X"
        if known is not None:
            assert c.to_value > known
    if known is None:
        assert "unknown" in f.message
    assert "RAISE" in f.message


@SETTINGS
@given(fmt=VERSIONS, mfs=MFS, p=P, wf=st.floats(0.05, 0.6), worst=st.floats(0.0, 40.0))
def test_kv_pool_exhausted_raises_only_into_spare_headroom(fmt: str, mfs: float, p: float, wf: float,
                                                           worst: float) -> None:
    s = state(fmt, mfs, p, wf, worst)
    s.running_requests_cap = 64
    s.crash = Crash(kind="kv_pool_exhausted", phase="decode", rank="TP0", line=9, message="Decode out of memory")
    f = next(f for f in diagnose(s) if f.id == "kv_pool_exhausted")
    check_spelling(f, fmt)
    for c in mfs_changes(f):
        assert mfs < c.to_value < 1 and "raise --mem-fraction-static" in f.message
        expect = worst - (c.to_value - c.from_value) * p
        assert abs(f.predicted["headroom_gb"] - expect) <= 0.011
        assert f.predicted["headroom_gb"] >= 5.0 - 0.011  # never raised into the target headroom


@SETTINGS
@given(fmt=VERSIONS, mfs=MFS, p=P, worst=st.floats(0.0, 4.0))
def test_unknown_p_still_lowers_and_says_why(fmt: str, mfs: float, p: float, worst: float) -> None:
    s = RunState(format=fmt, phase="crashed")
    s.server_args = {"mem_fraction_static": mfs}
    s.crash = Crash(kind="cuda_oom", phase="decode", rank="TP0", line=3, message="CUDA out of memory")
    f = next(f for f in diagnose(s) if f.id == "oom_crash")
    check_spelling(f, fmt)
    assume(f.changes)
    check_direction(f)
    assert f.predicted == {}  # no P: no prediction pretends to know


# ---- issue 34, item 5: a SIGKILL is an OOM only with evidence, on both engines ------------------

# the log's lines of a SIGKILL in any order, then (or not) the server's exit as its waiter saw it
_KILL_EVENTS = st.tuples(st.lists(st.sampled_from(["rank_dead", "exit_code", "killed"]), max_size=3),
                         st.sampled_from([[], ["exited_137"], ["exited_0"]])).map(lambda t: t[0] + t[1])


def _kill_state(backend: str, order: list[str], oom_at: int | None, hicache: bool, ready: bool,
                evidence: str | None) -> RunState:
    from cockpit.core import events as ev
    from cockpit.core.reducer import apply

    s = RunState(backend=backend, format="sglang-0.5.23" if backend == "sglang" else "vllm-0.33.0")
    args: dict[str, object] = {"tp_size": 2, "mem_fraction_static": 0.88}
    if hicache:
        args.update(enable_hierarchical_cache=True, hicache_size=100)
    apply(s, ev.ServerArgs(1, "2026-01-01 00:00:00", None, args, "ServerArgs"))
    if ready:
        apply(s, ev.ServerReady(2, "2026-01-01 00:00:01", None))
    line = 3
    for i, name in enumerate(order):
        if oom_at == i:
            apply(s, ev.OomKillLine(line, None, None, "Out of memory: Killed process 4242 (python3) total-vm:1kB"))
            line += 1
        if name == "rank_dead":
            apply(s, ev.RankDead(line, "2026-01-01 00:00:02", None, 1, -9, "crashed",
                                 "Subprocess scheduler_1 (pid=4242) crashed with exit code -9."))
        elif name == "exit_code":
            apply(s, ev.ExitCode(line, None, None, -9))
        elif name == "killed":
            apply(s, ev.Killed(line, None, None, "Killed"))
        else:
            apply(s, ev.ProcessExited(0, None, None, 137 if name == "exited_137" else 0, False, evidence))
        line += 1
    return s


@given(backend=st.sampled_from(["sglang", "vllm"]), order=_KILL_EVENTS, hicache=st.booleans(), ready=st.booleans(),
       host_mem=st.one_of(st.none(), st.floats(1.0, 2000.0)))
@SETTINGS
def test_a_sigkill_without_evidence_is_never_an_oom_and_gets_no_memory_advice(
        backend: str, order: list[str], hicache: bool, ready: bool, host_mem: float | None) -> None:
    from cockpit.backends import get_backend
    from cockpit.backends.base import HostFacts

    assume(any(n in ("rank_dead", "killed", "exited_137") for n in order))
    assume(not hicache or ready)  # HiCache pinning host memory before ready is the log's own evidence
    s = _kill_state(backend, order, None, hicache, ready, None)
    assert s.crash is not None
    assert s.crash.kind == "killed_by_signal" and s.crash.oom_evidence is None, (order, s.crash)
    hosts = [HostFacts(host="h", mem_available_gb=host_mem)] if host_mem is not None else []
    found = get_backend(backend).doctor.diagnose(s, None, hosts)
    crit = [f for f in found if f.severity == "critical"]
    assert [f.id for f in crit] == ["killed_by_signal"], [f.id for f in crit]
    assert "killed by signal 9 (SIGKILL)" in crit[0].message and "Who sent it is not known" in crit[0].message
    assert not crit[0].changes and not crit[0].alternatives, crit[0]


@given(backend=st.sampled_from(["sglang", "vllm"]), order=_KILL_EVENTS, oom_at=st.integers(0, 4),
       from_host=st.booleans())
@SETTINGS
def test_evidence_before_or_after_the_kill_makes_it_host_oom_killed(backend: str, order: list[str], oom_at: int,
                                                                     from_host: bool) -> None:
    from cockpit.backends import get_backend

    assume(any(n in ("rank_dead", "killed", "exited_137") for n in order))
    evidence = "the cgroup's oom_kill counter rose from 0 to 1 during the run (/sys/fs/cgroup/x/memory.events)"
    if from_host:  # the waiter's evidence rides on the server's exit
        order = [*(n for n in order if not n.startswith("exited")), "exited_137"]
    s = _kill_state(backend, order, None if from_host else min(oom_at, len(order) - 1), False, True,
                    evidence if from_host else None)
    assert s.crash is not None and s.crash.kind == "host_oom_killed", (order, s.crash)
    assert s.crash.oom_evidence
    found = get_backend(backend).doctor.diagnose(s, None, [])
    f = next(f for f in found if f.id == "host_oom_killed")
    assert "by the kernel's OOM killer" in f.message
