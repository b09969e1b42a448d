"""The hang kit, serving health and the rank views on the real engine: vLLM's CPU build at TP2.

One engine (two `VLLM::Worker_TP*` processes, real collectives, per-rank log prefixes) is shared by
the tests of this module, in order (a TP2 start costs 2-4 minutes of this machine's CPU): the rank
views; serving figures against the engine's own counters; a worker stopped with SIGSTOP while a
client generates (`hung` within the window although /health answers, `cockpit stacks` names the
stopped rank), then SIGCONT (`ready` again); last, the same worker SIGKILLed (crashed, rank TP1).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cockpit.backends import get_backend
from tests.conftest import isolated_env
from tests.real_engine.conftest import RealVllm
from tests.real_engine.lifecycle_kit import Generating

HANG_AFTER_S = 15
# the first test's setup starts a TP2 engine (2-4 minutes on a busy 2-core machine) after waiting
# for the machine-wide engine lock
pytestmark = pytest.mark.timeout(1500)
START_TIMEOUT_S = 420


@dataclass
class Engine:
    profile: Path
    env: dict[str, str]
    port: int
    name: str

    def cockpit(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cockpit", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)

    def status(self) -> dict[str, Any]:
        p = self.cockpit("status", str(self.profile), "--json", timeout=HANG_AFTER_S + 285)
        assert p.stdout, p.stderr
        return dict(json.loads(p.stdout))

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def proc_tree(root: int) -> dict[int, str]:
    """pid -> command line of `root` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out: dict[int, str] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out[pid] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        todo += children.get(pid, [])
    return out


def scrape(engine: Engine) -> dict[str, float]:
    """The engine's own /metrics: name -> value summed over label sets (histograms left out)."""
    text = urllib.request.urlopen(engine.url("/metrics"), timeout=10).read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.type in ("histogram",):
            continue
        for s in fam.samples:
            if s.name.startswith("vllm:") and not s.name.endswith("_created"):
                out[s.name] = out.get(s.name, 0.0) + float(s.value)
    return out


def health(engine: Engine) -> int:
    try:
        return int(urllib.request.urlopen(engine.url("/health"), timeout=10).status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.fixture(scope="module")
def tp2(real_vllm: RealVllm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    tmp = tmp_path_factory.mktemp("hang")
    # the engine at a lower priority: its two workers, bound to both cores, take every cycle while
    # they generate, and the status under test would starve (a host step stopped at 60 s)
    path = real_vllm.profile(tmp, "hang-tp2", server={"tensor-parallel-size": 2, "enforce-eager": True},
                             program=["nice", "-n", "10", str(real_vllm.vllm), "serve"],
                             env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"},
                             policy={"hang-after-s": HANG_AFTER_S})
    doc = yaml.safe_load(path.read_text())
    sim = tmp / "sim"
    sim.mkdir()
    eng = Engine(path, isolated_env(tmp, sim), int(doc["server"]["port"]), "hang-tp2")
    lock = real_vllm.venv.parent / ".engine.lock"  # the tier's engine_lock, held for the module
    with open(lock, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            up = eng.cockpit("up", str(path), "--wait", "ready", timeout=START_TIMEOUT_S)
            assert up.returncode == 0, up.stdout + up.stderr
            _lower_the_engines_group(_recorded_pid(tmp / "runs" / "hang-tp2"))
            # the first request after READY runs ~15 s on this machine (lazy one-time work in the
            # workers): an operator's first request, not part of any test's window
            first = json.dumps({"model": model_of(eng), "prompt": "hi", "max_tokens": 2}).encode()
            urllib.request.urlopen(urllib.request.Request(eng.url("/v1/completions"), data=first, headers={
                "Content-Type": "application/json"}), timeout=300).read()
            yield eng
        finally:
            # whatever a test left (a stopped worker, a status that timed out), the engine is
            # stopped here: a TP2 engine left running starves every later test of the 2 cores
            pid = _recorded_pid(tmp / "runs" / "hang-tp2")
            if pid is not None:
                for p in proc_tree(pid):
                    with contextlib.suppress(OSError):
                        os.kill(p, signal.SIGCONT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                eng.cockpit("down", str(path), timeout=120)
            if pid is not None:  # `down` failed: the run's own process group, by its recorded pid
                with contextlib.suppress(OSError):
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
            fcntl.flock(fh, fcntl.LOCK_UN)


def _lower_the_engines_group(pid: int | None) -> None:
    """`nice` alone does not lower the engine against the tests: with the kernel's autogroups on
    (Debian's and Ubuntu's default) CPU time is shared between sessions first, and the engine runs
    in a session of its own (the waiter's setsid). Its session's autogroup gets the nice value too."""
    if pid is None:
        return
    with contextlib.suppress(OSError), open(f"/proc/{pid}/autogroup", "w") as f:
        f.write("10")


def _recorded_pid(profile_runs: Path) -> int | None:
    """The server pid the host side recorded for the current run (never found by name)."""
    try:
        run = (profile_runs / "current").read_text().strip()
        return int((profile_runs / run / "pid").read_text().strip())
    except (OSError, ValueError):
        return None


def model_of(engine: Engine) -> str:
    data = json.loads(urllib.request.urlopen(engine.url("/v1/models"), timeout=10).read())
    return str(data["data"][0]["id"])


def test_rank_views_show_both_ranks_and_their_own_log_lines(tp2: Engine) -> None:
    st = tp2.status()
    assert [r["rank"] for r in st["ranks"]] == ["TP0", "TP1"]
    logs = tp2.cockpit("logs", str(tp2.profile), "--rank", "TP1")
    assert logs.returncode == 0, logs.stderr
    lines = [ln for ln in logs.stdout.splitlines() if ln.strip()]
    assert lines and "Worker_TP0" not in logs.stdout, logs.stdout[-2000:]
    assert any("Worker_TP1" in ln for ln in lines)


def test_serving_figures_are_the_engines_own_counters(tp2: Engine) -> None:
    idle = tp2.status()
    assert idle["phase"] == "ready", idle
    ours = scrape(tp2)  # read right after status returned: nothing ran in between
    sv = idle["serving"]
    assert sv["source"] == "/metrics"
    assert sv["counters"]["generation_tokens"] == ours["vllm:generation_tokens_total"]
    assert sv["counters"]["prompt_tokens"] == ours["vllm:prompt_tokens_total"]
    assert sv["running"] == ours["vllm:num_requests_running"] == 0
    assert sv["waiting"] == ours["vllm:num_requests_waiting"] == 0
    assert sv["kv_usage_pct"] == round(ours["vllm:kv_cache_usage_perc"] * 100, 2)
    assert sv["preemptions_per_min"] == 0
    # the engine exports no speculative-decoding counters without a draft model: not reported, not 0
    assert sv["spec_acceptance_pct"] is None and "spec_accepted_tokens" in sv["not_reported"]
    # every figure vLLM 0.32 exports is read under its newest name (the table's first choice)
    table = get_backend("vllm").metrics.serving()
    for figure in ("generation_tokens", "prompt_tokens", "running", "waiting", "kv_usage", "preemptions",
                   "requests_finished", "ttft", "itl", "e2e", "prefix_cache_hits", "prefix_cache_queries"):
        assert sv["names"][figure] == table[figure][0], figure

    client = Generating(tp2.port, model_of(tp2), max_tokens=400)
    client.start()
    try:
        time.sleep(3)
        before = scrape(tp2)
        busy = tp2.status()
        after = scrape(tp2)
    finally:
        client.stop.set()
    sv = busy["serving"]
    assert busy["phase"] == "ready"
    assert sv["gen_tok_s"] > 0
    # the figure status gave is the engine's own counter as it stood at some moment of the status
    # call: between the engine's readings just before and just after it (a status on a loaded
    # 2-core machine can take tens of seconds while the client generates ~200 tokens/s)
    gen_before, gen_then, gen_now = (before["vllm:generation_tokens_total"], sv["counters"]["generation_tokens"],
                                     after["vllm:generation_tokens_total"])
    assert gen_before <= gen_then <= gen_now, (gen_before, gen_then, gen_now, sv)
    assert before["vllm:prompt_tokens_total"] <= sv["counters"]["prompt_tokens"] <= after["vllm:prompt_tokens_total"]
    assert sv["running"] >= 1  # the client's request (and maybe Cockpit's probe)
    assert sv["ttft_ms"]["p50"] is not None or sv["ttft_ms"]["count"] == 0
    client.join(timeout=120)


def test_a_stopped_worker_is_hung_though_health_answers_then_ready_again(tp2: Engine) -> None:
    run = tp2.status()["run"]
    tree = proc_tree(int(run["pid"]))
    workers = {pid: cmd for pid, cmd in tree.items() if "Worker_TP1" in cmd}
    assert workers, tree
    (worker,) = workers
    client = Generating(tp2.port, model_of(tp2), max_tokens=400)
    client.start()
    time.sleep(2)
    os.kill(worker, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        st = tp2.status()
        took = time.monotonic() - t0
        assert health(tp2) == 200  # vLLM's /health does not see it
        assert st["phase"] == "hung", st
        assert took < HANG_AFTER_S + 30
        assert st["hung"]["since"] == st["phase_since"]
        hang = st["hung"]["evidence"]
        assert hang["hang_after_s"] == HANG_AFTER_S
        assert hang["still_for_s"] >= HANG_AFTER_S
        assert "no token generated" in hang["reason"]
        # the stacks: every process of the run read by py-spy, the stopped rank named
        sp = tp2.cockpit("stacks", str(tp2.profile), "--json", timeout=180)
        dump = json.loads(sp.stdout)
        roles = {p["role"]: p for p in dump["processes"]}
        for role in ("api_server", "engine_core", "worker"):
            assert roles[role]["frames"], (role, roles.get(role))
        ranks = {p["rank"]: p for p in dump["processes"] if p["role"] == "worker"}
        assert set(ranks) == {"TP0", "TP1"}
        assert ranks["TP1"]["state"] == "T" and ranks["TP1"]["pid"] == worker
        assert dump["odd_one_out"]["pid"] == worker and dump["odd_one_out"]["rank"] == "TP1"
        assert "stopped" in dump["odd_one_out"]["reason"]
        assert Path(dump["saved"]).is_file()
        # the journal keeps the phase
        runs = tp2.cockpit("runs", "--json")
        rows = json.loads(runs.stdout)
        row = next(r for r in rows if r["id"] == run["id"])
        assert row["phase"] == "hung", row
    finally:
        os.kill(worker, signal.SIGCONT)
        client.stop.set()  # a failed assertion above must not leave the client generating
    back = tp2.status()
    assert back["phase"] == "ready", back
    assert back["hung"] is None
    client.join(timeout=120)


def test_a_killed_worker_is_a_crash_of_its_rank(tp2: Engine) -> None:
    run = tp2.status()["run"]
    (worker,) = (pid for pid, cmd in proc_tree(int(run["pid"])).items() if "Worker_TP1" in cmd)
    os.kill(worker, signal.SIGKILL)
    deadline = time.monotonic() + 90
    st = tp2.status()
    while st["phase"] != "crashed" and time.monotonic() < deadline:
        time.sleep(2)
        st = tp2.status()
    assert st["phase"] == "crashed", st
    assert st["crash"]["rank"] == "TP1", st["crash"]
    assert "VllmWorker-1 died unexpectedly" in st["crash"]["message"]
