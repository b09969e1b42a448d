"""Logs of other programs are refused by `cockpit diagnose` (issue 23, "not our engine → exit 2").

The excerpts are the negative corpus tests/data/real/others/ (verbatim, each with its source): a
llama.cpp or TGI log holds lines our grammars would read (a PyTorch OOM, a Python traceback, a Rust
engine whose name contains "vllm"), and a benchmark client's summary names the engine it measured.
Each is refused as an operator runs it — a `cockpit diagnose` subprocess — with exit 2 and one line
naming the program, never a crash summary; a server log with such lines pasted into it still reads.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cockpit.backends.foreign import foreign_lines, refusal

DATA = Path(__file__).resolve().parents[1] / "data"
OTHERS = DATA / "real" / "others"


def _one_per_program() -> list[Path]:
    """The first excerpt of each program the negative corpus names (one subprocess each)."""
    seen: dict[str, Path] = {}
    for yml in sorted(OTHERS.glob("*.yaml")):
        label = yaml.safe_load(yml.read_text())["expect"]["looks_like"]
        seen.setdefault(label, yml.with_suffix(".log"))
    return list(seen.values())


def diagnose(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "cockpit", "diagnose", *args], input=stdin,
                          capture_output=True, timeout=120)


def test_the_negative_corpus_is_big_enough_and_sourced() -> None:
    ymls = sorted(OTHERS.glob("*.yaml"))
    assert len(ymls) >= 20
    labels = set()
    for yml in ymls:
        doc = yaml.safe_load(yml.read_text())
        assert doc["url"].startswith("https://github.com/") and doc["source"], yml.name
        assert doc["expect"]["recognised"] is False
        labels.add(doc["expect"]["looks_like"])
        assert yml.with_suffix(".log").stat().st_size > 0
    # the programs the issue names: llama.cpp and forks, TGI, TensorRT-LLM, LMDeploy, Ollama,
    # a Rust port named after vLLM, and benchmark clients
    for word in ("llama.cpp", "TGI", "TensorRT-LLM", "LMDeploy", "Ollama", "named after vLLM", "benchmark"):
        assert any(word in label for label in labels), word


@pytest.mark.parametrize("log", _one_per_program(), ids=lambda p: p.stem)
def test_cli_refuses_another_programs_log(log: Path) -> None:
    want = yaml.safe_load(log.with_suffix(".yaml").read_text())["expect"]["looks_like"]
    proc = diagnose(str(log))
    err = proc.stderr.decode()
    assert proc.returncode == 2, (proc.stdout[:300], err)
    assert proc.stdout == b""  # no summary, no "(no findings)"
    assert err.strip() == f"cockpit: error: {log}: looks like {want}, not SGLang or vLLM", err
    assert "Traceback" not in err


def test_json_refuses_too_and_standard_input_is_named() -> None:
    log = OTHERS / "huggingface-text-generation-inference-866.log"  # a PyTorch OOM line, then TGI's launcher
    proc = diagnose("--json", "-", stdin=log.read_bytes())
    assert proc.returncode == 2 and proc.stdout == b""
    assert proc.stderr.decode().strip() == ("cockpit: error: standard input: looks like a TGI "
                                            "(text-generation-inference) log, not SGLang or vLLM")


def test_a_server_log_with_a_benchmark_summary_pasted_in_still_reads(tmp_path: Path) -> None:
    """Marked lines set aside, the rest still reads as SGLang's: the log is ours and is diagnosed."""
    bench = (OTHERS / "sgl-project-sglang-8285.log").read_bytes()
    server = (DATA / "sglang-0.5.9-llama70b-kv-pool-exhausted-prefill.log").read_bytes()
    for name, text in (("before", bench + server), ("after", server + bench)):
        path = tmp_path / f"{name}.log"
        path.write_bytes(text)
        proc = diagnose("--json", str(path))
        assert proc.returncode == 1, (name, proc.stderr)
        assert b'"kv_pool_exhausted"' in proc.stdout


def test_a_few_marks_in_unknown_text_do_not_name_a_program() -> None:
    """Below the share, a mark is not enough to say whose log it is: the usual refusal stands."""
    text = "\n".join([f"line {i} of some notes" for i in range(20)] + ["see llama.cpp for comparison"]).encode()
    found = foreign_lines(text)
    assert found.label == "a llama.cpp log" and found.marked == 1 and found.lines == 21
    assert refusal(found, rest_is_ours=False) is None
    # and a log whose other lines read as ours is never refused, however many marks it holds
    assert refusal(foreign_lines(b"llama_model_loader: x\n" * 50), rest_is_ours=True) is None


def test_wrapper_names_and_outer_programs() -> None:
    # a compose service name carries the mark; the line after its `|` has none
    found = foreign_lines(b"vllm-rs-svc0  | thread caused non-unwinding panic. aborting.\n")
    assert found.label == "a vllm.rs log (a Rust engine named after vLLM)" and found.rest == b""
    # Ollama runs llama.cpp and passes its lines through: one Ollama line makes it Ollama's log
    text = (b"llama_model_loader: - type  f32:   65 tensors\n" * 5
            + b'time=2024-07-05T14:26:05.485+02:00 level=INFO source=server.go:594 msg="waiting"\n')
    assert foreign_lines(text).label == "an Ollama log"
