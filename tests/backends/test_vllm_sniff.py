"""The cheap test in front of vLLM's `log_score` (cockpit/backends/vllm/sniff.py): it may say "no"
only where the full score is 0, so which backend reads a log never changes; and deciding that an
SGLang log is SGLang's no longer imports the vLLM grammar."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cockpit.backends.vllm.logparse import log_score
from cockpit.backends.vllm.sniff import may_be_vllm

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


def corpus() -> list[Path]:
    files = [p for p in DATA.rglob("*") if p.is_file() and p.suffix != ".yaml"]
    files += [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    return sorted(files)


def test_no_only_where_the_full_score_is_zero_on_every_file_at_hand() -> None:
    said_no = 0
    for path in corpus():
        sample = path.read_bytes()[:64 * 1024]
        if not may_be_vllm(sample):
            said_no += 1
            assert log_score(sample) == 0.0, path
    assert said_no > 20  # the golden SGLang logs among them: the test must spare someone


def test_every_golden_sglang_log_is_spared_and_every_vllm_log_is_not() -> None:
    for path in sorted(DATA.glob("sglang-*.log")):
        assert not may_be_vllm(path.read_bytes()[:64 * 1024]), path.name
    for path in sorted(DATA.glob("vllm-*.log")) + sorted((DATA / "real" / "vllm").glob("*.log")):
        assert may_be_vllm(path.read_bytes()[:64 * 1024]), path.name


@pytest.mark.parametrize("line", [
    "(Worker_TP1 pid=4242) something",  # a process group
    "(APIServer pid=1) something",
    "Starting VLLM server",  # the word, any case
    "Maximum concurrency for 32,768 tokens per request: 10.58x",  # one of vLLM's own messages
    "INFO 11-29 10:00:00 [core.py:1] ready",  # the record head
    "INFO ١١-٢٩ ١٠:٠٠:٠٠ [core.py:1] ready",  # its digits as the grammar reads them: any Unicode digit
    "it said vl\x1b[0mlm",  # an escape inside the word: cleaning joins it up
    "it said vl\u0080lm",  # a C1 control (two bytes in UTF-8) likewise
    "(Worker_TP1 p\x07id=4242) something",  # a control character inside the group
])
def test_what_the_score_counts_is_never_spared(line: str) -> None:
    sample = ("[2026-02-24 11:55:44 TP0] Load weight begin. avail mem=94.60 GB\n" + line + "\n").encode()
    assert log_score(sample) > 0
    assert may_be_vllm(sample)


FRAGMENTS = ["INFO ", "ERROR ", "11-29 ", "10:00:00 ", "١١", "[core.py:1] ", "(", ")", "Worker_TP0", " pid=", "p", "id=",
             "12", "vl", "LM", "lm", "V", "\x1b[0m", "\x00", "\x85", "\u2028", "\r", "\n", " ", "é", "KV cache",
             " size:", "Engine", "Core", "max_model", "_len", "[2026-02-24 11:55:44 TP0] ", "avail mem=94.60 GB"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40), st.binary(max_size=8))
def test_no_only_where_the_full_score_is_zero_on_generated_openings(parts: list[str], noise: bytes) -> None:
    sample = "".join(parts).encode() + noise
    if not may_be_vllm(sample):
        assert log_score(sample) == 0.0


def test_detecting_an_sglang_log_does_not_import_the_vllm_grammar() -> None:
    log = DATA / "sglang-0.5.9-kimi-0.88-healthy.log"
    code = ("import sys; from cockpit.backends import detect_backend; "
            f"name = detect_backend(open({str(log)!r}, 'rb').read(65536)); "
            "print(name, 'cockpit.backends.vllm.logparse' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.split() == ["sglang", "False"]
