"""Issue 40 item 18: run files (`pid`, `exit_code`, `current`, a Slurm run's `job_id`, ...) reach
the disk before they replace the old ones.

Written as a temp file renamed over the old one, but never fsynced: after a host crash the rename
can be on disk and the data not (an empty `pid`, an `exit_code` that says nothing), or the rename
lost with the directory. Now one helper (runfiles._write) writes every run file: the data fsynced
before the rename, the directory after it. The helper is run for real under strace (the kernel's
own record of the calls), and a scan of the programs sent to hosts and login nodes checks that no
other code renames a file into place.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.remote import programs

REPO = Path(__file__).resolve().parents[2]

# the helper as each program calls it: the host program's, and the login node's (its own name for it)
CALLERS = {
    "host": "from cockpit.remote.programs.runfiles import _write; _write(sys.argv[1], 'exit 137')",
    "login": "from cockpit.remote.programs.loginside import _write; _write(sys.argv[1], 'exit 137')",
}


def _traced(tmp_path: Path, code: str) -> list[str]:
    strace = shutil.which("strace")
    if strace is None:
        pytest.fail("strace is missing: scripts/test.sh installs it (apt-get install -y strace)")
    target = tmp_path / "run" / "exit_code"
    target.parent.mkdir()
    target.write_text("old")
    trace = tmp_path / "trace"
    done = subprocess.run(
        [strace, "-f", "-o", str(trace), "-e", "trace=openat,open,fsync,fdatasync,rename,renameat,renameat2",
         sys.executable, "-c", f"import sys; {code}", str(target)],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "exit 137"
    return [line for line in trace.read_text().splitlines() if str(target.parent) in line or "fsync(" in line]


@pytest.mark.parametrize("program", sorted(CALLERS))
def test_a_run_file_is_fsynced_before_its_rename_and_the_directory_after(tmp_path: Path, program: str) -> None:
    calls = _traced(tmp_path, CALLERS[program])
    run_dir = str(tmp_path / "run")
    tmp_fd = next((int(m.group(1)) for line in calls if '/exit_code.tmp"' in line and "O_CREAT" in line
                   for m in [re.search(r"= (\d+)$", line)] if m), None)
    assert tmp_fd is not None, calls
    rename = next(i for i, line in enumerate(calls) if line.split()[1].startswith("rename") and "exit_code" in line)
    assert any(f"fsync({tmp_fd})" in line for line in calls[:rename]), f"no fsync of the data before the rename: {calls}"
    dir_fd = next((int(m.group(1)) for line in calls[rename:] if f'"{run_dir}"' in line and "O_DIRECTORY" in line
                   for m in [re.search(r"= (\d+)$", line)] if m), None)
    assert dir_fd is not None, f"the directory was never opened after the rename: {calls}"
    assert any(f"fsync({dir_fd})" in line for line in calls[rename:]), f"no fsync of the directory: {calls}"


def _calls(tree: ast.AST) -> list[tuple[str, str]]:
    """(enclosing function, called name) of every call of os.replace / os.rename / os.fsync."""
    out = []
    for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "os":
                out.append((fn.name, node.func.attr))
    return out


def test_every_program_sent_to_a_host_writes_run_files_through_the_one_helper() -> None:
    sent = set(programs.HOST_PROGRAM) | set(programs.LOGIN_PROGRAM)
    assert "runfiles.py" in programs.LOGIN_PROGRAM  # the login node's program carries the helper too
    renames: dict[str, set[str]] = {}
    writers = []
    for name in sorted(sent):
        tree = ast.parse((programs.PROGRAMS_DIR / name).read_text())
        for fn, attr in _calls(tree):
            if attr in ("replace", "rename"):
                renames.setdefault(f"{name}:{fn}", set())
        writers += [f"{name}:{n.name}" for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_write"]
        for fn, attr in _calls(tree):
            if f"{name}:{fn}" in renames:
                renames[f"{name}:{fn}"].add(attr)
    assert writers == ["runfiles.py:_write"], writers  # one writer of run files, not a copy per program
    # a rename into place only where the directory is synced after it: the helper, and the
    # profile's log link (a symlink repointed), which calls the helper's directory sync
    assert set(renames) == {"runfiles.py:_write", "logfiles.py:point_log_link"}, renames
    assert "fsync" in renames["runfiles.py:_write"]
    link = ast.parse((programs.PROGRAMS_DIR / "logfiles.py").read_text())
    fn = next(n for n in ast.walk(link) if isinstance(n, ast.FunctionDef) and n.name == "point_log_link")
    assert any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "_sync_dir"
               for c in ast.walk(fn)), "point_log_link renames without syncing the directory"
