"""`cockpit up/status/logs/down` against the simulator, locally and through real sshd on loopback.

Every test has its own HOME/XDG dirs, run-directory root, simulated-GPU directory and port. The
simulator runs at a high --sim-speed so a full 8-rank startup takes a few seconds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import free_port

SIM_SPEED = "200"
PY = sys.executable


@dataclass
class Env:
    root: Path
    env: dict[str, str]
    profile: Path
    sim_dir: Path
    log: Path
    port: int

    def cockpit(self, *args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [PY, "-m", "cockpit", *args], env=self.env, capture_output=True, text=True, timeout=timeout,
            cwd=self.root,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"cockpit {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def popen(self, *args: str) -> subprocess.Popen[bytes]:
        # bytes: a text-mode pipe would turn tqdm's carriage returns into newlines
        return subprocess.Popen([PY, "-m", "cockpit", *args], env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=self.root)

    def runs_dir(self, name: str) -> Path:
        return self.root / "runs" / name


def _profile_text(name: str, hosts: list[str], root: Path, sim_dir: Path, port: int, *, tp: int = 8,
                  extra_server: str = "", traffic: str = "steady", model: str = "/models/Kimi-K2.5",
                  mfs: float = 0.88, version: str = "0.5.9") -> str:
    host_lines = "\n".join(f"  - ssh: {h}" for h in hosts)
    # program[0] = this interpreter: works locally and on the loopback "remote" hosts alike
    program = [PY, "-m", "cockpit", "sim", "--sim-gpu", "rtx-pro-6000", "--sim-speed", SIM_SPEED,
               "--sim-traffic", traffic, "--sim-dir", str(sim_dir), "--sim-version", version]
    return (
        f"name: {name}\n"
        f"version: {version}\n"
        f"hosts:\n{host_lines}\n"
        f"program: {json.dumps(program)}\n"
        f"workdir: {root / 'work'}\n"
        f"log: logs/sglang.log\n"
        f"env: {{COCKPIT_SIM_GPU_DIR: '{sim_dir}'}}\n"
        f"server:\n"
        f"  model-path: {model}\n"
        f"  trust-remote-code: true\n"
        f"  tp: {tp}\n"
        f"  mem-fraction-static: {mfs}\n"
        f"  port: {port}\n"
        f"{extra_server}"
    )


def _make_env(tmp_path: Path, hosts: list[str], base_env: dict[str, str] | None = None, **kw: object) -> Env:
    root = tmp_path
    sim_dir = root / "gpus"
    sim_dir.mkdir()
    port = free_port()
    name = "simtest"
    (root / "profiles").mkdir()
    profile = root / "profiles" / f"{name}.yaml"
    profile.write_text(_profile_text(name, hosts, root, sim_dir, port, **kw))  # type: ignore[arg-type]
    env = dict(base_env or os.environ)
    home = Path(env.get("HOME", str(root / "home")))
    if base_env is None:
        home = root / "home"
        home.mkdir()
    env.update({
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(root / "xdg-config"),
        "XDG_DATA_HOME": str(root / "xdg-data"),
        "XDG_CACHE_HOME": str(root / "xdg-cache"),
        "COCKPIT_RUNS_ROOT": str(root / "runs"),
        "COCKPIT_SIM_GPU_DIR": str(sim_dir),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    })
    env.pop("SSH_AUTH_SOCK", None)
    return Env(root, env, profile, sim_dir, root / "work" / "logs" / "sglang.log", port)


def _pids_of_session(sid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(rest[3]) == sid and rest[0] != "Z":
            out.append(int(name))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _current_run(env: Env, name: str = "simtest") -> Path:
    d = env.runs_dir(name)
    return d / (d / "current").read_text().strip()


@pytest.fixture
def local_env(tmp_path: Path) -> Iterator[Env]:
    e = _make_env(tmp_path, ["local"])
    yield e
    e.cockpit("down", "simtest", "--timeout", "3")


def _scenario(env: Env, *sets: str) -> None:
    """up → refused second up → status → logs → down, with the checks the spec asks for."""
    set_args = [a for item in sets for a in ("--set", item)]
    up = env.cockpit("up", "simtest", *set_args, "--wait", "ready", "--timeout", "90")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "READY" in up.stdout

    again = env.cockpit("up", "simtest")
    assert again.returncode == 1
    assert "already running" in again.stderr

    st = env.cockpit("status", "simtest", "--json")
    assert st.returncode in (0, 1), st.stderr
    data = json.loads(st.stdout)
    assert data["phase"] == "ready" and data["health"] == "200"
    for item in sets:
        flag, _, value = item.partition("=")
        assert {"flag": "--" + flag.lstrip("-"), "to": float(value)}.items() <= data["flag_diff"][0].items()
    assert len(data["ranks"]) == 8
    for r in data["ranks"]:
        g = r["gpu"]
        assert g["index"] is not None
        assert g["used_gb"] is not None and g["used_gb"] > 10, r  # the agent saw the rank's memory
        assert g["total_gb"] is not None and g["age_s"] is not None
    run = data["run"]
    assert run["pid"] and run["id"] and run["started_at"]

    logs = env.cockpit("logs", "simtest", "--filter", "memory")
    assert logs.returncode == 0, logs.stderr
    assert "Load weight begin" in logs.stdout and "Capture cuda graph end" in logs.stdout
    assert "KV Cache is allocated" in logs.stdout
    assert "Decode batch" not in logs.stdout and "Prefill batch" not in logs.stdout
    tp3 = env.cockpit("logs", "simtest", "--filter", "memory", "--rank", "3").stdout.splitlines()
    assert tp3 and all(" TP3]" in ln for ln in tp3 if ln.startswith("[")), tp3[:5]
    assert len(env.cockpit("logs", "simtest", "--tail", "5").stdout.splitlines()) == 5
    bad = env.cockpit("logs", "simtest", "--filter", "([unclosed")
    assert bad.returncode == 2, bad.stderr

    run_dir = _current_run(env)
    sid = int((run_dir / "sid").read_text()) if (run_dir / "sid").exists() else None
    down = env.cockpit("down", "simtest", "--timeout", "10")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped" in down.stdout
    assert not _alive(run["pid"])
    if sid is not None:
        waiter = int((run_dir / "waiter_pid").read_text())
        assert [p for p in _pids_of_session(sid) if p != waiter] == []
    st2 = env.cockpit("status", "simtest", "--json")
    assert json.loads(st2.stdout)["phase"] == "stopped"


def test_up_status_logs_down_local(local_env: Env) -> None:
    _scenario(local_env, "--mem-fraction-static=0.86")
    runs = json.loads(local_env.cockpit("runs", "--json", check=True).stdout)
    assert len(runs) == 1
    rec = runs[0]
    assert rec["outcome"] == "stopped" and rec["ended_at"]
    assert rec["flags"]["mem-fraction-static"] == 0.86
    assert rec["max_total_num_tokens"] and rec["min_headroom_gb"]


def test_up_refuses_the_hicache_mistake_before_launch(local_env: Env) -> None:
    up = local_env.cockpit("up", "simtest", "--set", "enable-hierarchical-cache=true", "--set", "hicache-size=300")
    assert up.returncode == 1
    assert "refused before launch" in up.stderr and "300" in up.stderr
    assert not local_env.runs_dir("simtest").exists() or not (local_env.runs_dir("simtest") / "current").exists()


def test_up_status_logs_down_over_ssh(ssh_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = _make_env(tmp_path, ["gpu-box-1"], base_env={**os.environ, **ssh_home.env})
    try:
        _scenario(env)
    finally:
        env.cockpit("down", "simtest", "--timeout", "3")


def test_killed_cockpit_leaves_the_server_running_and_status_reattaches(local_env: Env) -> None:
    up = local_env.popen("up", "simtest", "--wait", "ready", "--timeout", "90")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (local_env.runs_dir("simtest") / "current").exists():
        time.sleep(0.05)
    time.sleep(0.3)
    up.send_signal(signal.SIGKILL)
    up.wait(10)
    run_dir = _current_run(local_env)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (run_dir / "pid").exists():
        time.sleep(0.05)
    pid = int((run_dir / "pid").read_text())
    time.sleep(0.5)
    assert _alive(pid)
    # a fresh cockpit attaches and follows the same run to readiness
    deadline = time.monotonic() + 60
    data: dict[str, object] = {}
    while time.monotonic() < deadline:
        st = local_env.cockpit("status", "simtest", "--json")
        data = json.loads(st.stdout)
        if data["phase"] == "ready":
            break
        time.sleep(0.5)
    assert data["phase"] == "ready"
    assert data["run"]["pid"] == pid  # type: ignore[index]
    # and `up` refuses rather than launching a second server
    assert local_env.cockpit("up", "simtest").returncode == 1


def test_logs_follow_across_killed_connections(ssh_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = _make_env(tmp_path, ["gpu-box-1"], base_env={**os.environ, **ssh_home.env})
    try:
        up = env.cockpit("up", "simtest", "--wait", "ready", "--timeout", "90")
        assert up.returncode == 0, up.stdout + up.stderr
        follower = env.popen("logs", "simtest", "-f")
        assert follower.stdout is not None
        first = b""
        while not first.endswith(b"\n"):  # it is connected and printing: now cut it off
            # os.read, not readline(): communicate() reads the raw pipe and a buffered read-ahead would be lost
            byte = os.read(follower.stdout.fileno(), 1)
            assert byte, follower.stderr.read() if follower.stderr else b""
            first += byte
        for _ in range(3):
            ssh_home.kill_connections()
            time.sleep(1.0)
        down = env.cockpit("down", "simtest", "--timeout", "10")
        assert down.returncode == 0, down.stdout + down.stderr
        out, err = follower.communicate(timeout=60)
        out = first + out
        assert b"connection lost" in err, err
        run_dir = _current_run(env)
        offset = int((run_dir / "log_offset").read_text())
        # the log, byte for byte, less the access lines of Cockpit's own requests (docs/OPERATIONS.md
        # "Footprint": `logs` leaves them out as the TUI does)
        from cockpit.core.ownlines import is_own_line

        expected = b"".join(ln for ln in env.log.read_bytes()[offset:].splitlines(keepends=True)
                            if not is_own_line(ln.decode("utf-8", "replace")))
        assert out == expected, err.decode()[-3000:]
        assert out.count(b"\n") > 50 and b"by=cockpit" not in out
    finally:
        env.cockpit("down", "simtest", "--timeout", "3")


def test_two_node_run_on_two_loopback_hosts(ssh_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Both "hosts" are this machine and share its simulated GPUs: a model small enough for two
    # ranks per GPU (at a low mem-fraction-static) stands in for two separate 8-GPU nodes. They
    # also share one port: node 1's dummy /health cannot bind there, which the simulator tolerates,
    # and readiness rests on node 0's log line and /health only (node 1's would always say 200).
    env = _make_env(tmp_path, ["gpu-box-1", "gpu-box-2"], base_env={**os.environ, **ssh_home.env}, tp=16,
                    traffic="none", model="/models/Llama-3.1-70B-Instruct", mfs=0.4)
    try:
        up = env.cockpit("up", "simtest", "--wait", "started", "--timeout", "60")
        assert up.returncode == 0, up.stdout + up.stderr
        deadline = time.monotonic() + 60
        data: dict = {}  # type: ignore[type-arg]
        while time.monotonic() < deadline:
            data = json.loads(env.cockpit("status", "simtest", "--json").stdout)
            captured = [r for r in data["ranks"] if r["avail_after_capture_gb"] is not None]
            if len(captured) >= 16 and data["phase"] == "ready":
                break
            time.sleep(0.5)
        assert data["phase"] == "ready", data["phase"]
        names = [r["rank"] for r in data["ranks"]]
        assert {f"TP{i}" for i in range(16)} <= set(names), names
        assert data["run"]["hosts"] == ["gpu-box-1", "gpu-box-2"]
        by_rank = {r["rank"]: r["gpu"] for r in data["ranks"]}
        assert by_rank["TP3"]["host"] == "gpu-box-1" and by_rank["TP3"]["index"] == 3
        assert by_rank["TP11"]["host"] == "gpu-box-2" and by_rank["TP11"]["index"] == 3
        assert by_rank["TP11"]["used_gb"] is not None
        run_id = data["run"]["id"]
        argv0 = json.loads((env.runs_dir("simtest") / run_id / "argv.json").read_text())
        argv1 = json.loads((env.runs_dir("simtest.node1") / run_id / "argv.json").read_text())
        for argv, rank in ((argv0, "0"), (argv1, "1")):
            assert argv[argv.index("--nnodes") + 1] == "2"
            assert argv[argv.index("--node-rank") + 1] == rank
        assert argv0[argv0.index("--dist-init-addr") + 1] == argv1[argv1.index("--dist-init-addr") + 1]
        assert (env.log.parent / "sglang.node1.log").exists()
        down = env.cockpit("down", "simtest", "--timeout", "10")
        assert "stopped" in down.stdout, down.stdout + down.stderr
        for d in ("simtest", "simtest.node1"):
            pid = int((env.runs_dir(d) / run_id / "pid").read_text())
            assert not _alive(pid)
    finally:
        env.cockpit("down", "simtest", "--timeout", "3")


def test_up_reports_a_startup_crash_with_its_diagnosis(local_env: Env) -> None:
    # Kimi's 71.82 GiB of weights per rank leave no KV pool at 0.5 of a 95.6 GiB card
    up = local_env.cockpit("up", "simtest", "--set", "mem-fraction-static=0.5", "--wait", "ready", "--timeout", "60")
    assert up.returncode == 1, up.stdout + up.stderr
    assert "init_not_enough_memory" in up.stderr
    assert "--mem-fraction-static 0.5 →" in up.stderr
    st = local_env.cockpit("status", "simtest", "--json")
    assert st.returncode == 1
    data = json.loads(st.stdout)
    assert data["phase"] == "crashed" and data["crash"]["kind"] == "init_not_enough_memory"
    # a crashed run does not block the next launch
    again = local_env.cockpit("up", "simtest", "--wait", "started")
    assert again.returncode == 0, again.stdout + again.stderr


def test_up_on_sglang_0_5_23_is_ready_by_its_ready_endpoint(tmp_path: Path) -> None:
    env = _make_env(tmp_path, ["local"], version="0.5.23", traffic="none")
    try:
        up = env.cockpit("up", "simtest", "--wait", "ready", "--timeout", "90", "--json")
        assert up.returncode == 0, up.stdout + up.stderr
        data = json.loads(up.stdout)
        assert data["readiness"] == "log + /ready" and data["health"] == "200" and data["ready"] is True
        assert data["format"] == "sglang-0.5.23"
    finally:
        env.cockpit("down", "simtest", "--timeout", "3")


def test_down_reports_leftovers_with_the_command_that_kills_them(local_env: Env) -> None:
    up = local_env.cockpit("up", "simtest", "--wait", "ready", "--timeout", "90")
    assert up.returncode == 0, up.stdout + up.stderr
    holder = subprocess.Popen(
        [PY, "-c",
         "import sys, time\nfrom pathlib import Path\nfrom cockpit.sim.gpus import ProcFile\n"
         "ProcFile(Path(sys.argv[1]), 5).set(3.0)\nprint('held', flush=True)\ntime.sleep(600)\n",
         str(local_env.sim_dir)],
        stdout=subprocess.PIPE, start_new_session=True, env=local_env.env,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        down = local_env.cockpit("down", "simtest", "--timeout", "10")
        assert down.returncode == 1, down.stdout + down.stderr
        assert f"leftover: pid {holder.pid}" in down.stderr and f"kill -9 {holder.pid}" in down.stderr
        assert holder.poll() is None  # reported, never killed without the operator
        # and a new launch never lands on top of it: refused, naming the pid and how to free it
        again = local_env.cockpit("up", "simtest", "--wait", "started", "--timeout", "30")
        assert again.returncode == 1, again.stdout + again.stderr
        assert f"{holder.pid} (GPU 5" in again.stderr and f"kill -9 {holder.pid}" in again.stderr
        assert "launched run" not in again.stdout
        assert holder.poll() is None
    finally:
        holder.kill()
        holder.wait(5)
    # once the GPU is free the same command launches
    up2 = local_env.cockpit("up", "simtest", "--wait", "started", "--timeout", "30")
    assert up2.returncode == 0, up2.stdout + up2.stderr
    local_env.cockpit("down", "simtest", "--timeout", "10")


def test_check_measures_ssh_hosts_with_the_agent(ssh_home, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = _make_env(tmp_path, ["gpu-box-1"], base_env={**os.environ, **ssh_home.env})
    # the simulated GPUs exist once a simulator has written them: fake the device list it writes
    from cockpit.sim.gpus import write_devices
    from cockpit.sim.presets import GPUS

    write_devices(env.sim_dir, GPUS["rtx-pro-6000"], 8)
    res = env.cockpit("check", "simtest", "--json")
    assert res.returncode in (0, 1), res.stderr
    data = json.loads(res.stdout)
    host = data["hosts"][0]
    assert host["host"] == "gpu-box-1" and host["source"] == "agent"
    assert host["mem_available_gb"] is not None and host["gpu_count"] == 8


def test_each_run_writes_its_own_log(local_env: Env) -> None:
    """Issue 17 (UX): every run appended to one log. Now each run writes `sglang.<run id>.log`, the
    profile's `logs/sglang.log` is Cockpit's link to the current run's file (`tail -F` follows it),
    and `runs show ID` names that run's own file."""
    env = local_env
    ids: list[str] = []
    for _ in range(2):
        up = env.cockpit("up", "simtest", "--set", "mem-fraction-static=0.5", "--wait", "ready", "--timeout", "60")
        assert up.returncode == 1, up.stdout + up.stderr  # a startup crash: quick, and it leaves decisive lines
        ids.append(_current_run(env).name)
    assert ids[0] != ids[1]
    files = [env.log.parent / f"sglang.{i}.log" for i in ids]
    assert env.log.is_symlink() and os.readlink(env.log) == files[1].name
    for f, run_id in zip(files, ids, strict=True):
        assert f.is_file() and not f.is_symlink() and (f.stat().st_mode & 0o777) == 0o600
        assert (env.runs_dir("simtest") / run_id / "log_path").read_text() == str(f)
        # each file holds one run: one server start, one crash
        assert f.read_text().count("init_not_enough_memory") <= 1 and f.read_text().count("server_args=") == 1
    show = env.cockpit("runs", "show", ids[0])
    assert show.returncode == 0, show.stdout + show.stderr
    assert re.search(rf"^log\s+{re.escape(str(files[0]))}$", show.stdout, re.M), show.stdout
    assert "crash, the lines that decide it:" in show.stdout and "Not enough memory" in show.stdout, show.stdout
    logs = env.cockpit("logs", "simtest")
    assert logs.returncode == 0 and logs.stdout.count("server_args=") == 1, logs.stdout[-2000:]
