"""Issue 40 item 14: a process's name cannot forge lines in `cockpit stacks`' text output.

The run's server renames itself (/proc/self/comm, as prctl PR_SET_NAME does) to a title holding a
newline, and starts a child whose command line holds one: both are real processes of the run,
read from /proc by the host program. Before, the text output printed each name raw, so the part
after the newline stood on a line of its own (an "ODD ONE OUT" or a pid the operator would act
on). Now control characters in everything the host reports are shown escaped, on the one line.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.reliability.helpers import PY, make_env, wait_for

# comm is 15 bytes at most: "v::" makes the host program take the title as the engine's name
SERVER = r"""
import os, subprocess, sys, time
stop = sys.argv[1]
with open('/proc/self/comm', 'w') as f:
    f.write('v::\nFORGED1 x')
child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', 'a\nFORGED2 y'])
print('ready', flush=True)
give_up = time.time() + 120
while not os.path.exists(stop) and time.time() < give_up:
    time.sleep(0.05)
child.kill()
"""


def test_newlines_in_process_names_stay_on_their_line(tmp_path: Path, ledger) -> None:
    env = make_env(tmp_path)
    env.env["PATH"] = "/usr/bin:/bin"  # no py-spy: the process lines are printed all the same
    stop = tmp_path / "stop"
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    env.write_profile("nm", f"name: nm\nhosts:\n  - ssh: local\nprogram: {json.dumps([PY, str(script), str(stop)])}\n"
                            f"workdir: {tmp_path / 'work'}\nlog: logs/nm.log\n")
    try:
        up = env.cockpit("up", "nm", "--wait", "started", "--timeout", "30")
        assert up.returncode == 0, up.stdout + up.stderr
        log = tmp_path / "work" / "logs" / "nm.log"
        assert wait_for(lambda: log.exists() and b"ready" in log.read_bytes(), timeout=30)
        ledger.tried("cockpit", 2)
        out = env.cockpit("stacks", "nm")
        assert "Traceback" not in out.stderr, out.stderr
        lines = out.stdout.splitlines()
        assert any("v::\\nFORGED1 x" in line for line in lines), out.stdout
        assert any("a\\nFORGED2 y" in line for line in lines), out.stdout
        assert not [line for line in lines if line.lstrip().startswith(("FORGED1", "FORGED2"))], out.stdout
        as_json = json.loads(env.cockpit("stacks", "nm", "--json").stdout)
        assert any(p["name"] == "v::\nFORGED1 x" for p in as_json["processes"])  # the data itself is kept
    finally:
        stop.touch()
        env.cockpit("down", "nm", "--timeout", "5")
