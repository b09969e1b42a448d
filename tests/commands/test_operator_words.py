"""Issue 29 (the operator's words) and issue 27's second operator round, outside the TUI: what
`diagnose` prints for a crash, predictions in words with units, plurals, a server's message
quoted inside our sentence, and help text on every option of every subcommand."""

from __future__ import annotations

import argparse
from pathlib import Path

from cockpit.cli import build_parser
from cockpit.core.findings import predicted_phrases, quoted
from cockpit.core.numbers import plural
from cockpit.sim.sglang.crashes import crash_text, cuda_oom_text
from tests.commands.test_cli_diagnose import cockpit, kimi_log


def _sim_crash_log(tmp_path: Path) -> Path:
    """The story's run with the crash exactly as the simulator's SGLang 0.5.9 prints it: the full
    traceback, each `File "…"` frame followed by the source line it quotes (`ret = self.forward_extend(`)."""
    oom = cuda_oom_text(alloc_bytes=224 * 2**20, gpu_index=3, total_gib=95.59, free_bytes=68.2 * 2**20, process_gib=95.53,
                        allocated_gib=91.15, graph_gib=3.75, reserved_unallocated_gib=0.18)
    tb = crash_text("prefill-oom", "0.5.9", arch_file="deepseek_v2.py", oom=oom).rstrip("\n").split("\n")
    lines = kimi_log(crash=False).rstrip("\n").split("\n")
    lines.append("[2026-11-20 12:02:07 TP0] Prefill batch, #new-seq: 2, #new-token: 8192, #cached-token: 256, "
                 "token usage: 0.14, #running-req: 53, #queue-req: 0, input throughput (token/s): 3265.65, cuda graph: False")
    lines.append(f"[2026-11-20 12:02:08 TP3] Scheduler hit an exception: {tb[0]}")
    lines += tb[1:]
    lines += ["", "[2026-11-20 12:02:08] SIGQUIT received. signum=None, frame=None. It usually means one child failed."]
    p = tmp_path / "sim-crash.log"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_diagnose_names_the_real_frame_not_the_quoted_call(tmp_path: Path) -> None:
    """Issue 27: `File "", in forward_extend`, a frame taken from the quoted source line
    `ret = self.forward_extend(` with no file, was the decisive line."""
    r = cockpit("diagnose", str(_sim_crash_log(tmp_path)))
    assert 'File ""' not in r.stdout, r.stdout
    assert 'sglang/srt/model_executor/model_runner.py", in forward_extend' in r.stdout


def test_diagnose_says_predictions_in_words_with_units(tmp_path: Path) -> None:
    """Issue 29: `predicted: headroom_gb 5.55, max_total_num_tokens 174,654` (raw keys)."""
    r = cockpit("diagnose", str(_sim_crash_log(tmp_path)))
    pred = [ln for ln in r.stdout.splitlines() if "predicted:" in ln]
    assert pred, r.stdout
    for ln in pred:
        assert "_gb" not in ln and "max_total_num_tokens" not in ln and "_" not in ln, ln
    assert any("GiB free per rank" in ln and "KV tokens" in ln for ln in pred), pred


def test_predicted_phrases_never_show_a_key() -> None:
    """Issue 29: the crash modal read `freed gb per gpu 1.58 · kv gb 40.72` for vLLM's prediction."""
    words = predicted_phrases({"freed_gb_per_gpu": 1.58, "headroom_gb": 5.26, "max_total_num_tokens": 333539,
                               "kv_gb": 40.72}, 346512)
    assert words == ["5.26 GiB free per rank", "−12,973 KV tokens (→ 333,539)", "1.58 GiB freed per GPU",
                     "KV cache 40.72 GiB per GPU"]
    assert predicted_phrases({"kv_gb_gain_per_gpu": -1.5}) == ["KV cache −1.50 GiB per GPU"]
    # an engine's own keys carry its words once its backend is loaded (the registry registers them)
    from cockpit.backends import get_backend

    get_backend("vllm")
    assert predicted_phrases({"max_model_len": 24576}) == ["context length 24,576 tokens"]
    # a key no view knows yet: words and GiB, never `_gb`
    assert predicted_phrases({"spare_pool_gb": 2.5}) == ["spare pool 2.5 GiB"]


def test_plurals_and_quoted_messages() -> None:
    """Issue 29: "2 other change(s)" when there was one; a finding read `needed.. This`."""
    assert plural(1, "other change") == "1 other change"
    assert plural(2, "other change") == "2 other changes"
    assert plural(1200, "request") == "1,200 requests"
    msg = "ValueError: 2.00 GiB KV cache is needed."
    assert f"vLLM failed to start: {quoted(msg, 240)}. This is not" == \
        "vLLM failed to start: ValueError: 2.00 GiB KV cache is needed. This is not"
    assert quoted("x" * 300, 10) == "x" * 9 + "…"


def test_vllm_startup_error_reads_as_one_sentence() -> None:
    """The `needed.. This` finding, through the vLLM backend's own diagnosis."""
    from cockpit.backends import get_backend
    from cockpit.core.state import Crash, RunState

    state = RunState(format="vllm-0.33.0", phase="crashed")
    state.crash = Crash(kind="startup_error", phase="startup", rank=None, line=40,
                        message="ValueError: To serve at least one request with the models's max seq len, "
                                "more KV cache is needed.")
    text = " ".join(f.message for f in get_backend("vllm").doctor.diagnose(state))
    assert ".." not in text and "is needed. This is not a memory signature" in text, text


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = sub
                out.update({f"{name} {k}": v for k, v in _subparsers(sub).items()})
    return out


def test_every_cli_option_has_help_text() -> None:
    """Issue 29: `cockpit tune --help` had no text for `--objective` or `--dataset`. Every option and
    positional of every subcommand (walked from the real parser) says what it is."""
    parser = build_parser()
    subs = _subparsers(parser)
    assert {"tune", "plan", "up", "demo", "diagnose"} <= set(subs)
    missing = []
    for name, sub in {"cockpit": parser, **subs}.items():
        for action in sub._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
                continue
            if not (action.help or "").strip():
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, "options without help text: " + ", ".join(missing)


MODELS = Path(__file__).resolve().parents[1] / "data" / "models"


def test_plan_marks_a_set_value_as_set_and_the_warn_level_on_it() -> None:
    """Issue 29: `cockpit plan --model-config` (no profile) marked the --set value `← profile`, and
    its summary hung "below the 3 GiB warn level" on the recommendation's clause."""
    r = cockpit("plan", "--model-config", str(MODELS / "kimi-k2.5"), "--tp", "8", "--gpu-mem-gb", "95",
                "--set", "mem-fraction-static=0.93")
    assert r.returncode == 1, r.stdout + r.stderr
    row = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("0.93 "))
    assert row.endswith("← --set") and "profile" not in row, row
    assert max(len(ln) for ln in r.stdout.splitlines()) <= 80, r.stdout  # an 80-column terminal folds nothing
    flat = " ".join(r.stdout.split())
    summary = flat[flat.index("0.93 predicted"):]
    mine, _, rec = summary.partition(";")
    rec = rec.split(" note: ")[0]
    assert "below the 3 GiB warn level" in mine and "warn level" not in rec, summary


def test_the_vllm_plan_fits_80_columns_too() -> None:
    r = cockpit("plan", "--model-config", str(MODELS / "qwen3-32b"), "--tp", "2", "--gpu-mem-gb", "79.18", "--backend",
                "vllm", "--set", "gpu-memory-utilization=0.97", "--set", "max-model-len=32768")
    assert r.returncode in (0, 1), r.stderr
    assert max(len(ln) for ln in r.stdout.splitlines()) <= 80, r.stdout
    assert "0.97" in r.stdout and "← --set" in r.stdout


def test_plan_on_an_unreachable_host_says_how_to_plan_without_it(tmp_path: Path) -> None:
    """Issue 29: `cockpit plan PROFILE --gpu-mem-gb 96` stopped at "cannot reach …" without saying
    that --model-config DIR plans without the host."""
    import os
    import subprocess
    import sys

    from tests.conftest import free_port

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (tmp_path / "profiles").mkdir()
    port = free_port()  # nothing listens there: refused at once
    (tmp_path / "profiles" / "far.yaml").write_text(
        f"name: far\nhosts: [{{ssh: 'root@127.0.0.1:{port}'}}]\nserver: {{model-path: /models/Kimi-K2.5, tp: 8}}\n")
    out = subprocess.run([sys.executable, "-m", "cockpit", "plan", "far", "--gpu-mem-gb", "96"], capture_output=True,
                         text=True, cwd=tmp_path, env={**os.environ, "HOME": str(home)}, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "cockpit plan --model-config DIR --gpu-mem-gb 96 --tp 8" in out.stderr, out.stderr
    assert "/models/Kimi-K2.5 on the host" in out.stderr
