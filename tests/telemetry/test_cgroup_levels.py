"""Issue 40, finding 17: one cgroup reader for this machine and for remote hosts, every level.

The local facts read only the process's own cgroup and the root; the host agent walked the levels
but paired the tightest limit with the process's own usage. A limit set on a parent group (a
container's, a Slurm job's with the step below it) was missed here, or its siblings' usage ignored
there. Now both use the agent's `cgroup_memory`: every level of the cgroup path, v2 (`memory.max` /
`memory.current`) and v1 (`memory.limit_in_bytes` / `memory.usage_in_bytes`, the "no limit" huge
number ignored), and the level with the least headroom binds.
Tested on cgroup-like trees (the root and the process's cgroup file passed in), and on a real v1
memory cgroup made here when this machine lets us (root, a writable memory hierarchy).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from cockpit.remote.programs import agent
from cockpit.telemetry.hostfacts import cgroup_headroom_bytes

GB = 1_000_000_000
V1_UNLIMITED = "9223372036854771712"


def _write(d: Path, **files: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name.replace("_", ".", 1)).write_text(text + "\n")


def test_v2_a_limit_on_a_parent_level_binds(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    _write(root, memory_max="max", memory_current=str(50 * GB))
    _write(root / "job", memory_max=str(8 * GB), memory_current=str(6 * GB))  # the allocation: siblings use 6 GB
    _write(root / "job" / "step", memory_max="max", memory_current=str(1 * GB))  # our own group: unlimited
    me = tmp_path / "self-cgroup"
    me.write_text("0::/job/step\n")
    assert cgroup_headroom_bytes(root, me) == 2 * GB  # 8 − 6 on the parent, not "unlimited"
    assert agent.cgroup_memory(str(root), str(me)) == (8 * GB, 6 * GB)  # the agent: the same level


def test_v1_a_slurm_job_limit_above_the_step(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    _write(root / "memory", memory_limit_in_bytes=V1_UNLIMITED, memory_usage_in_bytes=str(90 * GB))
    job = root / "memory" / "slurm" / "uid_0" / "job_5"
    _write(job, memory_limit_in_bytes=str(4 * GB), memory_usage_in_bytes=str(3 * GB))
    _write(job / "step_0", memory_limit_in_bytes=V1_UNLIMITED, memory_usage_in_bytes=str(1 * GB))
    me = tmp_path / "self-cgroup"
    me.write_text("5:memory:/slurm/uid_0/job_5/step_0\n4:cpu:/slurm/uid_0/job_5/step_0\n0::/\n")
    assert cgroup_headroom_bytes(root, me) == 1 * GB
    assert agent.cgroup_memory(str(root), str(me)) == (4 * GB, 3 * GB)


def test_the_tightest_of_several_limited_levels_and_none_when_unlimited(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    _write(root, memory_max="max")
    _write(root / "a", memory_max=str(100 * GB), memory_current=str(10 * GB))  # 90 free
    _write(root / "a" / "b", memory_max=str(20 * GB), memory_current=str(15 * GB))  # 5 free: binds
    _write(root / "a" / "b" / "c", memory_max=str(30 * GB), memory_current=str(2 * GB))  # 28 free
    me = tmp_path / "self-cgroup"
    me.write_text("0::/a/b/c\n")
    assert cgroup_headroom_bytes(root, me) == 5 * GB
    free = tmp_path / "free"
    _write(free, memory_max="max")
    _write(free / "x", memory_max="max", memory_current=str(GB))
    me.write_text("0::/x\n")
    assert cgroup_headroom_bytes(free, me) is None and agent.cgroup_memory(str(free), str(me)) == (None, None)


def _own_v1_memory_group() -> Path | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            parts = line.split(":", 2)
            if len(parts) == 3 and "memory" in parts[1].split(","):
                d = Path("/sys/fs/cgroup/memory") / parts[2].strip("/")
                return d if d.is_dir() and os.access(d, os.W_OK) else None
    except OSError:
        return None
    return None


@pytest.mark.skipif(os.geteuid() != 0 or _own_v1_memory_group() is None,
                    reason="needs root and a writable cgroup v1 memory hierarchy (this machine's layout)")
def test_a_real_v1_parent_limit_is_seen_from_a_child_group() -> None:
    """A real parent group limited to 3 GB with an unlimited child; a Python process moved into
    the child reads its headroom through the agent's reader and the local facts: at most 3 GB."""
    own = _own_v1_memory_group()
    assert own is not None
    parent = own / f"cockpit-test-{uuid.uuid4().hex[:8]}"
    child = parent / "step"
    parent.mkdir()
    try:
        (parent / "memory.limit_in_bytes").write_text(str(3 * GB))
        child.mkdir()
        code = ("import os, sys, json; open(sys.argv[1], 'w').write(str(os.getpid()));"
                "from cockpit.remote.programs import agent; from cockpit.telemetry.hostfacts import cgroup_headroom_bytes;"
                "print(json.dumps([agent.cgroup_memory(), cgroup_headroom_bytes()]))")
        # the child moves itself in before it reads (writing its pid to the group's cgroup.procs)
        r = subprocess.run([sys.executable, "-c", code, str(child / "cgroup.procs")], capture_output=True, text=True,
                           timeout=60, check=False, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        assert r.returncode == 0, r.stderr
        import json

        (limit, usage), headroom = json.loads(r.stdout.strip().splitlines()[-1])
        # the kernel keeps the limit in whole pages: 3 GB rounded down to one
        assert 3 * GB - 4096 < limit <= 3 * GB and usage is not None and 0 < headroom <= limit, r.stdout
    finally:
        for d in (child, parent):
            try:
                d.rmdir()
            except OSError:
                pass
