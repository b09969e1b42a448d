"""Issue 18 items 7 and 8: a full disk is reported as such and leaves consistent state; a run
whose directory was deleted mid-run is still found, refused a second launch, and stopped.

Disk full is real: the run root lives on a small tmpfs mounted for the test (CI runs as root),
filled so that 0..15 pages stay free; every launch must end either as a complete run (a pid, a
live server that `status` finds) or as a refusal that names the disk with no server left running
and no journal row stuck at `running`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.reliability.helpers import PY, alive, make_env, wait_for, writer_script

PAGE = 4096


@pytest.fixture
def small_fs(tmp_path: Path):
    mnt = tmp_path / "fs"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs here ({done.stderr.strip()}): these tests need root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _writers(stop: Path) -> list[int]:
    """Live processes running the writer with this stop file (the servers of these tests)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(stop).encode() in cmd and alive(int(name)):
            out.append(int(name))
    return out


def _fill(fs: Path, leave_pages: int) -> None:
    filler = fs / "filler"
    filler.unlink(missing_ok=True)
    st = os.statvfs(fs)
    room = st.f_bavail * st.f_frsize - leave_pages * PAGE
    with open(filler, "wb") as f:
        try:
            f.write(b"\0" * max(0, room))
        except OSError:
            pass


def _run_log_of(file_name: str, profile: str) -> bool:
    """Is this a run's own log file of `profile` (`<profile>.<run id>.log`, one file per run)?"""
    return re.fullmatch(rf"{re.escape(profile)}\.\d{{8}}-\d{{6}}-\w+\.log", file_name) is not None


def test_full_disk_never_reads_as_success(tmp_path: Path, small_fs: Path, ledger) -> None:
    env = make_env(tmp_path)
    env.env["COCKPIT_RUNS_ROOT"] = str(small_fs / "runs")
    stop = tmp_path / "stop"
    program = json.dumps([PY, str(writer_script(tmp_path)), str(stop), "0.05"])
    outcomes: dict[str, int] = {"launched": 0, "refused": 0}
    try:
        said: dict[int, str] = {}
        for free in (0, 2, *range(6, 16)):
            name = f"disk{free}"
            env.write_profile(name, f"name: {name}\nprogram: {program}\nworkdir: {tmp_path / 'work'}\nlog: logs/{name}.log\n")
            _fill(small_fs, free)
            ledger.fault("disk")
            up = env.cockpit("up", name, "--wait", "started", "--timeout", "20")
            out = up.stdout + up.stderr
            assert "Traceback" not in out and "pid None" not in out, out
            mine = [p for p in _writers(stop) if _run_log_of(Path(f"/proc/{p}/fd/1").resolve().name, name)]
            if up.returncode == 0:
                outcomes["launched"] += 1
                assert len(mine) == 1, (free, out, mine)
                (small_fs / "filler").unlink()  # status may write (nothing here needs room, but be fair)
                st = json.loads(env.cockpit("status", name, "--json").stdout)
                assert st["run"] and st["run"]["pid"] == mine[0], (free, st["run"])
            else:
                outcomes["refused"] += 1
                assert any(w in out for w in ("disk full", "ENOSPC", "No space left")), (free, out)
                said[free] = out.strip().splitlines()[0][-160:]
                assert not mine, f"{free} pages free: refused, but its server runs: {mine}\n{out}"
            ledger.survive("disk")
        ledger.note(f"full disk: {outcomes['launched']} complete launches, {outcomes['refused']} honest refusals "
                    "with 0-15 pages free on a 1 MiB tmpfs")
        assert outcomes["refused"] >= 1 and outcomes["launched"] >= 1, outcomes
        for free, msg in sorted(said.items()):
            ledger.note(f"  {free:2d} pages free: {msg}")
        # the journal: no row says running without a server behind it
        (small_fs / "filler").unlink(missing_ok=True)
        runs = json.loads(env.cockpit("runs", "--json").stdout)
        live_names = {f"disk{i}" for i in range(16) if any(
            _run_log_of(Path(f"/proc/{p}/fd/1").resolve().name, f"disk{i}") for p in _writers(stop))}
        for r in runs:
            if r["outcome"] in ("running", "ready"):
                assert r["profile"] in live_names, r
    finally:
        stop.touch()
        wait_for(lambda: not _writers(stop), 10)


def test_deleted_run_directory_still_finds_the_server(tmp_path: Path, ledger) -> None:
    env = make_env(tmp_path)
    stop = tmp_path / "stop"
    program = json.dumps([PY, str(writer_script(tmp_path)), str(stop), "0.05"])
    env.write_profile("gone", f"name: gone\nprogram: {program}\nworkdir: {tmp_path / 'work'}\nlog: logs/gone.log\n")
    up = env.cockpit("up", "gone", "--wait", "started")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        assert wait_for(lambda: len(_writers(stop)) == 1, 10)
        server = _writers(stop)[0]
        shutil.rmtree(env.runs_root / "gone")  # the whole profile directory, lock and `current` included
        ledger.fault("cockpit")
        st = env.cockpit("status", "gone", "--json")
        assert st.returncode == 0, st.stderr
        run = json.loads(st.stdout)["run"]
        assert run is not None and run["pid"] == server, st.stdout[-800:]
        again = env.cockpit("up", "gone", "--wait", "started")
        assert again.returncode == 1 and "already running" in again.stderr, again.stdout + again.stderr
        assert _writers(stop) == [server], "a second server was launched beside the first"
        down = env.cockpit("down", "gone", "--timeout", "5")
        assert down.returncode == 0, down.stdout + down.stderr
        assert "not running" not in down.stdout, down.stdout
        assert wait_for(lambda: not alive(server), 10), "down did not stop the server"
        ledger.survive("cockpit")
    finally:
        stop.touch()
        for p in _writers(stop):
            os.kill(p, signal.SIGKILL)
        time.sleep(0.1)
