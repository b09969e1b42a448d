"""Issue 27: secrets never in the argv of the programs Cockpit runs beside the server.

A real run (locally, and over SSH to a real sshd on loopback) with HF_TOKEN in `env` and the API
key in `server:`. While Cockpit works on it — `up`, `status` (the host program, the telemetry
agent, the readiness probe's tunnel), `status --json`, `logs`, `down` — another local user
(`nobody`, runuser) reads every process's argv with `ps` over and over. The token must never
show; the key only in the server's own argv (SGLang takes it there; Cockpit adds no copy in its
host program, agent or shells). The Slurm side (the login-side program, the job) is held by
tests/slurm/test_slurm_secrets.py in the same way.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tests.reliability._planted import as_other
from tests.reliability.helpers import make_env, wait_for, writer_profile

TOKEN = "hf_audit_t0ken_d0_not_leak_5150"
API_KEY = "sk-audit-k3y-d0-not-leak-0615"


class PsWatch(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.lines: list[str] = []
        self.rounds = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            ps = as_other("ps", "-eww", "-o", "pid,args", "--no-headers", check=False)
            self.rounds += 1
            self.lines += [ln for ln in ps.stdout.splitlines() if TOKEN in ln or API_KEY in ln]
            time.sleep(0.01)


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_no_secret_in_any_argv_while_cockpit_works(where: str, request, tmp_path: Path, ledger) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test switches to the user nobody: run it as root (CI does)")
    base, host = None, "local"
    if where == "ssh":
        base, host = request.getfixturevalue("ssh_home").env, "gpu-box-1"
    env = make_env(tmp_path, base)
    env.write_profile("aud", writer_profile("aud", host, tmp_path, tmp_path / "stop", delay=0.05)
                      + f"env: {{HF_TOKEN: '{TOKEN}'}}\nserver:\n  api-key: '{API_KEY}'\n")
    watch = PsWatch()
    watch.start()
    server_pid = None
    try:
        up = env.cockpit("up", "aud", "--wait", "started")
        assert up.returncode == 0, up.stdout + up.stderr
        run_dir = env.current_run("aud")
        assert wait_for(lambda: (run_dir / "pid").exists(), 10)
        server_pid = int((run_dir / "pid").read_text())
        for args in (("status", "aud"), ("status", "aud", "--json"), ("logs", "aud", "--tail", "3"),
                     ("status", "aud")):
            done = env.cockpit(*args)
            assert done.returncode in (0, 1), done.stderr
        (tmp_path / "stop").touch()
        env.cockpit("down", "aud", "--timeout", "5")
    finally:
        (tmp_path / "stop").touch()
        watch.halt.set()
        watch.join(30)
    ledger.fault("secrets")
    assert watch.rounds >= 20, watch.rounds
    token_seen = sorted({ln[:160] for ln in watch.lines if TOKEN in ln})
    assert not token_seen, f"HF_TOKEN in argv: {token_seen}"
    key_pids = {int(ln.split()[0]) for ln in watch.lines if API_KEY in ln}
    assert key_pids <= {server_pid}, sorted({ln[:160] for ln in watch.lines})
    ledger.note(f"argv audit ({where}): {watch.rounds} ps rounds as nobody, token 0 lines, key only in the server")
    ledger.survive("secrets")
