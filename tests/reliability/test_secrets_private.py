"""Issue 18 item 2: secrets in a profile stay private from other local users.

A real run (locally, and over SSH to a real sshd on loopback) with HF_TOKEN in `env` and
`--api-key` in `server:`. Then, as the other local user `nobody` (runuser): `ps` must not show
HF_TOKEN anywhere, and the API key only in the server's own argv (SGLang takes it on its command
line; Cockpit adds no second copy); the run directory cannot be read. Run directories are 0700,
their files 0600, the journal 0600 and it never holds the key; every display masks it.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.reliability.helpers import make_env, wait_for, writer_profile

TOKEN = "hf_tok3n_d0_not_leak_8842"
API_KEY = "sk-ap1-k3y-d0-not-leak-5531"


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    return subprocess.run([runuser, "-u", "nobody", "--", *argv], capture_output=True, text=True, timeout=30)


def _profile(name: str, host: str, tmp_path: Path) -> str:
    return (writer_profile(name, host, tmp_path, tmp_path / "stop", delay=0.05)
            + f"env: {{HF_TOKEN: '{TOKEN}'}}\nserver:\n  api-key: '{API_KEY}'\n")


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_secrets_are_not_readable_by_another_local_user(where: str, request, tmp_path: Path, ledger) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test switches to the user nobody: run it as root (CI does)")
    base = None
    host = "local"
    if where == "ssh":
        ssh_home = request.getfixturevalue("ssh_home")
        base, host = ssh_home.env, "gpu-box-1"
    env = make_env(tmp_path, base)
    os.chmod(tmp_path, 0o755)  # nobody may walk to the run directory: only its own mode protects it
    env.write_profile("sec", _profile("sec", host, tmp_path))
    up = env.cockpit("up", "sec", "--wait", "started")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        run_dir = env.current_run(name="sec")
        assert wait_for(lambda: (run_dir / "pid").exists(), 10)
        ps = as_nobody("ps", "-eww", "-o", "pid,args", "--no-headers")
        assert ps.returncode == 0, ps.stderr
        ledger.fault("secrets")
        token_seen = [ln for ln in ps.stdout.splitlines() if TOKEN in ln]
        key_seen = [ln for ln in ps.stdout.splitlines() if API_KEY in ln]
        assert not token_seen, f"HF_TOKEN readable by nobody in: {token_seen}"
        server_pid = int((run_dir / "pid").read_text())
        assert [int(ln.split()[0]) for ln in key_seen] == [server_pid], key_seen

        # the run directory and its files: 0700 / 0600, and nobody cannot read them
        assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE(run_dir.parent.stat().st_mode) == 0o700
        for f in run_dir.iterdir():
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, (f, oct(f.stat().st_mode))
        assert json.loads((run_dir / "env.json").read_text()) == {"HF_TOKEN": TOKEN}  # the owner's copy
        denied = as_nobody("cat", str(run_dir / "env.json"))
        assert denied.returncode != 0 and TOKEN not in denied.stdout
        log = Path(json.loads(json.dumps((run_dir / "log_path").read_text())))
        assert stat.S_IMODE(log.stat().st_mode) == 0o600  # SGLang prints its args (the key) into it

        # every display masks the key; the journal never holds it
        for args in (("status", "sec"), ("status", "sec", "--json"), ("runs",), ("runs", "--json")):
            out = env.cockpit(*args)
            assert API_KEY not in out.stdout + out.stderr and TOKEN not in out.stdout + out.stderr, args
        st = json.loads(env.cockpit("status", "sec", "--json").stdout)
        assert st["run"]["flags"]["api-key"] == "***"
        run_id = st["run"]["id"]
        show = env.cockpit("runs", "show", run_id)
        assert "***" in show.stdout and API_KEY not in show.stdout
        jdir = env.journal
        for f in jdir.iterdir():
            assert API_KEY.encode() not in f.read_bytes(), f
            if f.name.startswith("journal.sqlite3"):
                assert stat.S_IMODE(f.stat().st_mode) == 0o600, (f, oct(f.stat().st_mode))
        ledger.survive("secrets")
    finally:
        (tmp_path / "stop").touch()
        env.cockpit("down", "sec", "--timeout", "5")


def test_flag_diffs_in_the_tui_and_cli_mask_secret_values(ledger) -> None:
    """A key set for one run (`--set api-key=…`) shows up as a flag diff: the TUI header's words
    and the CLI's `a → b` form both mask it; other flags stay readable."""
    from cockpit.core.findings import FlagChange
    from cockpit.core.secrets import MASK, without_masked
    from cockpit.ui.format import flag_diff_words

    change = FlagChange("--api-key", API_KEY, "sk-new-" + API_KEY)
    for text in (flag_diff_words(change), change.as_diff()):
        assert API_KEY not in text and MASK in text, text
    assert "0.88" in FlagChange("--mem-fraction-static", 0.93, 0.88).as_diff()
    # relaunching a past run's flags never launches the literal mask
    assert without_masked({"api-key": MASK, "tp": 8}) == {"tp": 8}
    ledger.tried("secrets", 3)
