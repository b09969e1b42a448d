"""`cockpit report` (issue 39 item 3): a live run, an ended one from the journal and a log file
alone, each as one Markdown report; no secret of the profile survives into any of them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.core.redact import redact_argv, redact_text, secret_values
from cockpit.core.report import MAX_CHARS, Known, ReportFacts, render_report
from cockpit.core.state import Crash, RunState
from tests.conftest import free_port, isolated_env

PY = sys.executable
DATA = Path(__file__).resolve().parents[1] / "data"
API_KEY = "sk-live-REPORTKEY-1111"
HF = "hf_REPORTTOKEN2222"
REDIS_PW = "REDISPW3333"
CLOUD = "AKIAREPORT4444"
SECRETS = (API_KEY, HF, REDIS_PW, CLOUD)


def test_redaction_masks_known_values_argv_json_flags_and_url_passwords() -> None:
    flags = {"api-key": API_KEY, "kv-transfer-config": json.dumps(
        {"kv_connector": "X", "extra": {"redis_url": f"redis://admin:{REDIS_PW}@cache:6379", "secret_key": CLOUD}})}
    known = secret_values(flags, {"HF_TOKEN": HF, "PATH": "/usr/bin"})
    assert {API_KEY, HF, REDIS_PW, CLOUD} <= known and "/usr/bin" not in known
    argv = ["vllm", "serve", "m", "--api-key", API_KEY, f"--kv-transfer-config={flags['kv-transfer-config']}",
            "--max-total-tokens", "4096"]
    out = " ".join(redact_argv(argv, known))
    assert not any(s in out for s in SECRETS) and "--max-total-tokens 4096" in out and "redis://admin:***@cache" in out
    # without the known values, the patterns alone
    line = (f"non-default args: {{'api_key': '{API_KEY}', 'hf_token': \"{HF}\", "
            f"'url': 'redis://u:{REDIS_PW}@h'}} Authorization: Bearer abcdefghijkl")
    text = redact_text(line)
    assert not any(s in text for s in SECRETS) and "abcdefghijkl" not in text


def test_the_report_is_clean_bounded_and_says_what_it_does_not_know() -> None:
    home = "/home/op"
    st = RunState(backend="vllm", phase="crashed")
    st.crash = Crash("cuda_oom", "prefill", "TP0", 7, "\x1b[31mtorch.OutOfMemoryError\x1b[0m", ["x" * 5000] * 200)
    facts = ReportFacts(source="a test", cockpit="0.1.0", profile="p", backend="vllm", state=st, phase="crashed",
                        crash=st.crash.to_json(), decisive=list(st.crash.decisive_lines),
                        excerpt=[(n, f"{home}/models/m \x1b]0;title\x07line {n} " + "y" * 3000) for n in range(1, 400)],
                        command=["vllm", "serve", f"{home}/models/m"], engine=Known("vllm 0.32.0"),
                        torch=Known(None, "not in the log"))
    text = render_report(facts, home=home)
    assert len(text) <= MAX_CHARS
    assert "\x1b" not in text and "\x07" not in text and not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text)
    assert home not in text and "~/models/m" in text
    assert "not recorded (not in the log)" in text and "cut" in text


def _profile(root: Path, sim_dir: Path) -> Path:
    program = [PY, "-m", "cockpit", "sim", "--sim-backend", "vllm", "--sim-gpu", "h100", "--sim-speed", "20",
               "--sim-startup-speed", "200", "--sim-traffic", "none", "--sim-dir", str(sim_dir), "serve"]
    kv = json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both", "kv_connector_extra_config": {
        "remote_url": f"redis://admin:{REDIS_PW}@cache.internal:6379", "secret_key": CLOUD}})
    (root / "profiles").mkdir()
    path = root / "profiles" / "rep.yaml"
    path.write_text(
        "name: rep\nbackend: vllm\nversion: 0.33.0\nhosts:\n  - ssh: local\n"
        f"program: {json.dumps(program)}\nworkdir: {root / 'work'}\nlog: logs/vllm.log\n"
        f"env: {{COCKPIT_SIM_GPU_DIR: '{sim_dir}', HF_TOKEN: '{HF}'}}\n"
        "server:\n  model: Qwen/Qwen3-32B\n  tensor-parallel-size: 2\n  max-model-len: 32768\n"
        f"  port: {free_port()}\n  api-key: {API_KEY}\n  kv-transfer-config: '{kv}'\n")
    return path


@pytest.fixture
def rep(tmp_path: Path):  # type: ignore[no-untyped-def]
    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    env = isolated_env(tmp_path, sim_dir)
    path = _profile(tmp_path, sim_dir)

    def cockpit(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "cockpit", *args], env=env, capture_output=True, text=True, timeout=timeout,
                              cwd=tmp_path)

    yield path, cockpit
    cockpit("down", str(path), "--timeout", "5")


def _clean(text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, (leaked, text[:3000])
    assert "\x1b" not in text and len(text) <= MAX_CHARS


def test_a_live_an_ended_and_a_log_file_report_and_no_secret_survives(rep, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, cockpit = rep
    up = cockpit("up", str(path), "--wait", "ready", "--timeout", "120")
    assert up.returncode == 0, up.stdout + up.stderr
    log_text = next((tmp_path / "work" / "logs").glob("*.log")).read_text()
    assert API_KEY in log_text or REDIS_PW in log_text  # the engine echoes its arguments: the report must not

    live = cockpit("report", str(path))
    assert live.returncode == 0, live.stderr
    _clean(live.stdout)
    for section in ("### Verdict", "### Versions", "### GPUs", "### Command", "### Memory per rank", "### Phase timeline",
                    "### Decisive lines", "### Advice"):
        assert section in live.stdout, section
    assert "from a live run" in live.stdout and "READY" in live.stdout
    command = live.stdout.split("### Command", 1)[1].split("###", 1)[0]
    assert "redis://admin:***@cache.internal" in command and '"secret_key":"***"' in command, command
    assert "| torch | not recorded (Cockpit does not read" in live.stdout

    down = cockpit("down", str(path), "--timeout", "10")
    assert down.returncode == 0, down.stdout + down.stderr
    runs = json.loads(cockpit("runs", "--json").stdout)
    run_id = runs[0]["id"]
    out = tmp_path / "report.md"
    ended = cockpit("report", run_id[:12], "--output", str(out))
    assert ended.returncode == 0, ended.stderr
    text = out.read_text()
    _clean(text)
    assert "from the journal" in text and f"run {run_id}" in text and "STOPPED" in text
    assert (out.stat().st_mode & 0o777) == 0o600

    log = cockpit("report", str(next((tmp_path / "work" / "logs").glob("*.log"))))
    assert log.returncode == 0, log.stderr
    _clean(log.stdout)
    assert "The server's arguments as its log printed them" in log.stdout


@pytest.mark.parametrize("target", ["no-such-run-or-profile", "/nonexistent/dir/server.log", "."])
def test_a_bad_target_is_exit_2_with_a_clear_message(tmp_path: Path, target: str) -> None:
    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    done = subprocess.run([PY, "-m", "cockpit", "report", target], env=isolated_env(tmp_path, sim_dir),
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert any(w in done.stderr for w in ("not a log file, a profile or a run id", "is a directory", "no such file"))


def test_a_log_file_alone_reports_its_crash_with_line_numbers() -> None:
    done = subprocess.run([PY, "-m", "cockpit", "report", str(DATA / "sglang-0.5.23-kimi-0.93-prefill-oom.log")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "`cuda_oom` during prefill on TP3 (log line 141)" in text and "| TP3 | 94.60 |" in text
    assert re.search(r"^141 \| .*OutOfMemoryError", text, re.M), text[-3000:]
    assert "not recorded (a log file alone" in text
