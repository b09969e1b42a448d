"""Issue 27: a host run tree another user prepared is never trusted (the SSH/local target).

The run root (`COCKPIT_RUNS_ROOT`) is a directory every user may write. The other local user
`nobody` (runuser) plants `<profile>/current` and a run directory whose `pid`, `pgid`, `sid` and
`proc_start` name a process of the operator's (a `sleep` the test starts: the start time is
readable by anyone in /proc). Before, `cockpit status` showed that process as the run and
`cockpit down` signalled it. Now both are refused naming the path and its owner, and the process
lives on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.reliability._planted import as_other, shared_dir
from tests.reliability.helpers import make_env, writer_profile


def _starttime(pid: int) -> int:
    data = Path(f"/proc/{pid}/stat").read_text()
    return int(data[data.rfind(")") + 2:].split()[19])


def test_a_planted_host_run_is_refused_and_its_pid_never_signalled(tmp_path: Path, ledger) -> None:
    victim = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        with shared_dir() as shared:
            env = make_env(tmp_path)
            env.env["COCKPIT_RUNS_ROOT"] = str(shared / "runs")
            env.write_profile("ht", writer_profile("ht", "local", tmp_path, tmp_path / "stop"))
            run = shared / "runs" / "ht" / "R1"
            as_other("mkdir", "-p", str(run))
            files = {"pid": victim.pid, "pgid": victim.pid, "sid": victim.pid,
                     "proc_start": _starttime(victim.pid), "started_at": "2026-12-01T00:00:00Z"}
            for name, value in files.items():
                as_other("sh", "-c", 'printf %s "$1" > "$2"', "sh", str(value), str(run / name))
            as_other("sh", "-c", 'printf R1 > "$1"', "sh", str(run.parent / "current"))
            ledger.fault("files")

            st = env.cockpit("status", "ht")
            assert st.returncode != 0, st.stdout + st.stderr
            assert "belongs to nobody" in st.stderr and str(run.parent / "current") in st.stderr, st.stderr
            assert str(victim.pid) not in st.stdout
            down = env.cockpit("down", "ht", "--timeout", "3")
            assert down.returncode != 0 and "belongs to nobody" in down.stderr, down.stdout + down.stderr
            up = env.cockpit("up", "ht", "--wait", "started", "--timeout", "10")
            assert up.returncode != 0 and "belongs to nobody" in up.stderr, up.stdout + up.stderr
            time.sleep(0.3)
            assert victim.poll() is None, "the planted pid was signalled"
            assert "Traceback" not in st.stderr + down.stderr + up.stderr
            ledger.survive("files")
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(5)
        (tmp_path / "stop").touch()
        assert os.path.exists(tmp_path / "stop")


def test_a_runs_root_that_is_the_operators_own_link_still_works(tmp_path: Path, ledger) -> None:
    """Runs kept on another disk through a link of the operator's own: followed, its target checked."""
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    env = make_env(tmp_path)
    (tmp_path / "runs-link").symlink_to(real)
    env.env["COCKPIT_RUNS_ROOT"] = str(tmp_path / "runs-link")
    env.write_profile("hl", writer_profile("hl", "local", tmp_path, tmp_path / "stop"))
    try:
        up = env.cockpit("up", "hl", "--wait", "started")
        assert up.returncode == 0, up.stdout + up.stderr
        assert (real / "hl" / "current").exists()
        st = env.cockpit("status", "hl")
        assert st.returncode in (0, 1) and "refusing" not in st.stderr, st.stdout + st.stderr
    finally:
        (tmp_path / "stop").touch()
        env.cockpit("down", "hl", "--timeout", "5")
    ledger.tried("files")
