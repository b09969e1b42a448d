"""Issue 40 item 9: a log read from a file and the same bytes read from a pipe get one diagnosis.

Which engine wrote a log was told from its opening: 64 KiB of a file, but of standard input only
what the pipe had buffered when it was peeked (8 KiB at most). The same bytes then read as SGLang's
through a pipe and as vLLM's from the file. Now standard input's opening is read to the same 64 KiB
(and handed to the parser before the rest), and an engine's own start-up marks in it (SGLang's
`server_args=` dump, vLLM's `non-default args:` / version banner) outweigh the share of lines that
merely look like its records. Each case runs the real `cockpit diagnose --json`, once on the file
and once with the bytes written into a real pipe.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.reliability.helpers import PY, REPO, make_env

DATA = Path(__file__).resolve().parents[1] / "data"
SGLANG = (DATA / "sglang-0.5.9-llama70b-tp8-healthy.log").read_bytes()
VLLM = (DATA / "real-engine" / "vllm-0.32.0-cpu-spec-ngram.log").read_bytes()


def _head(data: bytes, size: int) -> bytes:
    return data[: data.rfind(b"\n", 0, size) + 1]


def _twice(tmp_path: Path, data: bytes) -> tuple[dict, dict]:  # type: ignore[type-arg]
    env = make_env(tmp_path)
    log = tmp_path / "server.log"
    log.write_bytes(data)
    runs = []
    for args, stdin in (([str(log)], None), (["-"], data)):
        done = subprocess.run([PY, "-m", "cockpit", "diagnose", "--json", *args], input=stdin, capture_output=True,
                              timeout=120, cwd=REPO, env=env.env)
        assert done.returncode in (0, 1), done.stderr.decode()[-2000:]
        runs.append(json.loads(done.stdout))
    return runs[0], runs[1]


def _same(a: dict, b: dict) -> None:  # type: ignore[type-arg]
    assert a["backend"] == b["backend"], (a["backend"], b["backend"])
    assert [f["id"] for f in a["findings"]] == [f["id"] for f in b["findings"]]
    assert a["lines"] == b["lines"]


def test_a_file_and_a_pipe_choose_the_engine_from_one_sample(tmp_path: Path) -> None:
    # 8 KiB of SGLang's records (what a pipe had buffered), then vLLM's start-up for the rest of the
    # 64 KiB a file's opening holds
    data = _head(SGLANG, 8192) + VLLM * 3
    from_file, from_pipe = _twice(tmp_path, data)
    _same(from_file, from_pipe)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_start_ups_own_marks_outweigh_lines_that_look_like_the_other_engines(tmp_path: Path, engine: str) -> None:
    # a launcher's chatter first, every line of it naming the other engine (or stamped like SGLang's
    # records), then the engine's own start-up
    if engine == "vllm":
        chatter = b"".join(b"[2026-02-24 11:55:%02d] launcher: sglang not installed here, using vllm\n" % (i % 60)
                           for i in range(60))
        start = _head(VLLM, 6000)
    else:
        chatter = b"".join(b"(APIServer pid=1) INFO 12-01 22:07:%02d [launch.py:1] vllm absent, starting sglang\n"
                           % (i % 60) for i in range(60))
        start = _head(SGLANG, 3000)
    from_file, from_pipe = _twice(tmp_path, chatter + start)
    assert from_file["backend"] == engine, from_file["backend"]
    _same(from_file, from_pipe)
