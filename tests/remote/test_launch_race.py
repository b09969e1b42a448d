"""A run read in the middle of its launch (another cockpit's `up` racing this one's, between the
waiter starting the server and writing its pid) is a live server being started, not "a server that
has exited with its processes still alive" (seen once under xdist in
tests/reliability/test_cockpit_killed.py::test_two_cockpits_on_one_profile_launch_once)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from cockpit.remote.programs import hostside


def _run_dir(tmp_path: Path, server: subprocess.Popen[bytes], waiter: int) -> Path:
    d = tmp_path / "runs" / "p" / "20261202-060000-abcd"
    d.mkdir(parents=True)
    # what the waiter has written before it starts the server: its pid and the run's session;
    # no `proc_start`, no `pid` yet, and the server not yet exec'd (its cmdline is not argv.json's)
    (d / "waiter_pid").write_text(str(waiter))
    (d / "sid").write_text(str(server.pid))
    (d / "argv.json").write_text(json.dumps(["python3", "-m", "sglang.launch_server"]))
    return d


def test_a_run_between_start_and_pid_is_alive(tmp_path: Path) -> None:
    server = subprocess.Popen(["sleep", "30"], start_new_session=True)  # leads its session and group
    try:
        info = hostside._run_info(str(_run_dir(tmp_path, server, waiter=os.getpid())))
        assert info["alive"] is True and info["pid"] == server.pid, info
        assert info["members"] == [server.pid] and not info["lost"]
    finally:
        server.kill()
        server.wait()


def test_without_its_waiter_the_same_run_is_not_taken_for_a_launch(tmp_path: Path) -> None:
    # the waiter gone (killed) and no pid recorded: nothing says a launch is under way; the
    # processes left are reported as such, as before
    gone = subprocess.Popen(["true"])
    gone.wait()
    server = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        info = hostside._run_info(str(_run_dir(tmp_path, server, waiter=gone.pid)))
        assert info["alive"] is False and info["pid"] is None and info["members"] == [server.pid], info
    finally:
        server.kill()
        server.wait()
