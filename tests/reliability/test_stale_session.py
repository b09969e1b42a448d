"""Issue 40 item 2: a run's recorded session id, once the run is over, names nobody.

The run's processes were found by the session id the waiter recorded at launch. When the run
ends its session is empty and its number free: the kernel hands it out again (pids wrap within
minutes on a busy box) and whatever process gets it — here a `sleep` of the operator's own, in a
session of its own (setsid) — was listed by `stacks`, blocked the next `up` ("processes still
alive") and was SIGTERMed by `down`. The test does what a wrapped pid would: it writes the
stranger's session id into the ended run's `sid` file (the number reused), then runs the real
`cockpit down`, `stacks` and `up`. The stranger must survive all three and be named by none.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.reliability.helpers import alive, make_env, wait_for, writer_profile


def test_a_stranger_holding_the_ended_runs_session_id_is_not_the_runs(tmp_path: Path, ledger) -> None:
    env = make_env(tmp_path)
    stop = tmp_path / "stop"
    env.write_profile("st", writer_profile("st", "local", tmp_path, stop))
    stranger: subprocess.Popen[bytes] | None = None
    try:
        up = env.cockpit("up", "st", "--wait", "started", "--timeout", "30")
        assert up.returncode == 0, up.stdout + up.stderr
        run = env.current_run("st")
        waiter = int((run / "waiter_pid").read_text())
        stop.touch()  # the writer ends, its waiter records the exit code and leaves
        assert wait_for(lambda: (run / "exit_code").exists() and not alive(waiter), timeout=30)

        stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)  # setsid: sid == its pid
        assert os.getsid(stranger.pid) == stranger.pid
        (run / "sid").write_text(str(stranger.pid))  # the ended run's session number, reused
        ledger.fault("cockpit")

        stacks = env.cockpit("stacks", "st", "--json")
        assert str(stranger.pid) not in stacks.stdout, stacks.stdout
        down = env.cockpit("down", "st", "--timeout", "3")
        assert "Traceback" not in down.stderr, down.stderr
        time.sleep(0.3)
        assert stranger.poll() is None, f"`down` signalled the stranger: {down.stdout}{down.stderr}"
        stop.unlink()
        again = env.cockpit("up", "st", "--wait", "started", "--timeout", "30")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "still alive" not in again.stdout + again.stderr
        assert stranger.poll() is None
        ledger.survive("cockpit")
    finally:
        stop.touch()
        env.cockpit("down", "st", "--timeout", "5")
        if stranger is not None:
            stranger.send_signal(signal.SIGKILL)
            stranger.wait(5)
