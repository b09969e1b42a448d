"""A run read in the middle of its launch (another cockpit's `up` racing this one's, between the
waiter starting the server and writing its pid) is a live server being started, not "a server that
has exited with its processes still alive" (seen once under xdist in
tests/reliability/test_cockpit_killed.py::test_two_cockpits_on_one_profile_launch_once)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from cockpit.remote.programs import hostside

# A waiter as the host program makes one: named cockpit-waiter, in a session of its own, with the
# server its child leading its own process group (no exec'd engine: `sleep`).
WAITER = """
import os, subprocess, sys, time
with open('/proc/self/comm', 'w') as f:
    f.write('cockpit-waiter')
server = subprocess.Popen(['sleep', '30'], preexec_fn=lambda: os.setpgid(0, 0))
print(server.pid, flush=True)
server.wait()
"""


def _waiter_and_server() -> tuple[subprocess.Popen[bytes], int]:
    waiter = subprocess.Popen([sys.executable, "-c", WAITER], start_new_session=True, stdout=subprocess.PIPE)
    assert waiter.stdout is not None
    return waiter, int(waiter.stdout.readline())


def _stop(waiter: subprocess.Popen[bytes], server: int) -> None:
    for pid in (server, waiter.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    waiter.wait()


def _run_dir(tmp_path: Path, sid: int, waiter: int) -> Path:
    d = tmp_path / "runs" / "p" / "20261202-060000-abcd"
    d.mkdir(parents=True)
    # what the waiter has written before it starts the server: its pid and the run's session;
    # no `proc_start`, no `pid` yet, and the server not yet exec'd (its cmdline is not argv.json's)
    (d / "waiter_pid").write_text(str(waiter))
    (d / "sid").write_text(str(sid))
    (d / "argv.json").write_text(json.dumps(["python3", "-m", "sglang.launch_server"]))
    return d


def test_a_run_between_start_and_pid_is_alive(tmp_path: Path) -> None:
    waiter, server = _waiter_and_server()
    try:
        info = hostside._run_info(str(_run_dir(tmp_path, waiter.pid, waiter=waiter.pid)))
        assert info["alive"] is True and info["pid"] == server, info
        assert info["members"] == [server] and not info["lost"]
    finally:
        _stop(waiter, server)


def test_without_its_waiter_the_session_no_longer_names_the_run(tmp_path: Path) -> None:
    # the waiter gone (killed) and no pid recorded: nothing says a launch is under way, and the
    # recorded session id is a number the kernel may have given to anyone since (issue 40 item 2):
    # the process now in that session is not the run's
    gone = subprocess.Popen(["true"])
    gone.wait()
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        info = hostside._run_info(str(_run_dir(tmp_path, stranger.pid, waiter=gone.pid)))
        assert info["alive"] is False and info["pid"] is None and info["members"] == [], info
    finally:
        stranger.kill()
        stranger.wait()
