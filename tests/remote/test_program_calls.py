"""The calls of the programs sent to hosts and login nodes (cockpit/remote/calls.py), against a real
sshd on loopback: an operation that is safe to repeat survives a refused connection (sshd down,
then back within the retry's back-off), and the once-only ones (launch, submit) are not repeated."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from cockpit.remote.host import HostOps
from cockpit.remote.login import SlurmLogin
from cockpit.transport.base import Unreachable
from cockpit.transport.ssh import SSHTransport
from tests.conftest import SshHome


async def _with_sshd_down_then_up(ssh_env: SshHome, call: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run `call()` while the sshd is stopped; start it again 0.2 s later (before the first retry)."""
    ssh_env.stop()
    try:
        task = asyncio.create_task(call())
        await asyncio.sleep(0.2)
        assert not task.done(), "the first attempt should wait to retry, not end the call"
    finally:
        await asyncio.to_thread(ssh_env.start)
    return await asyncio.wait_for(task, 30)


async def test_login_find_retries_a_refused_connection(ssh_env: SshHome, tmp_path: Path) -> None:
    t = SSHTransport("gpu-box-1")
    login = SlurmLogin(t, runs_root=str(tmp_path / "runs"))
    try:
        run = await _with_sshd_down_then_up(ssh_env, lambda: login.find("p", str(tmp_path)))
        assert run is None  # the login program ran (after the retry) and found no run of "p"
    finally:
        await t.close()


async def test_host_find_retries_a_refused_connection(ssh_env: SshHome, tmp_path: Path) -> None:
    t = SSHTransport("gpu-box-1")
    ops = HostOps(t, runs_root=str(tmp_path / "runs"))
    try:
        ans = await _with_sshd_down_then_up(ssh_env, lambda: ops.call({"op": "find", "profile": "p"}))
        assert isinstance(ans, dict) and ans.get("run") is None, ans
    finally:
        await t.close()


async def test_submit_is_not_repeated_over_a_refused_connection(ssh_env: SshHome, tmp_path: Path) -> None:
    t = SSHTransport("gpu-box-1")
    login = SlurmLogin(t, runs_root=str(tmp_path / "runs"))
    ssh_env.stop()
    try:
        with contextlib.suppress(Unreachable):
            await login.submit("p", "r1", workdir=str(tmp_path), script="#!/bin/sh\n", sbatch=["sbatch"], meta={})
            raise AssertionError("submit should fail while the login node refuses connections")
    finally:
        ssh_env.start()
        await t.close()
    assert t._failures == 1  # one attempt: a second sbatch could queue a second job
