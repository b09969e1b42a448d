"""`cockpit diagnose` end to end: a real log file (or stdin) through the real parser and CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def cockpit(*args: str, stdin: bytes | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "cockpit", *args], input=stdin, capture_output=True, cwd=cwd,
                          timeout=60, check=False)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def kimi_log(mfs: float = 0.93, *, crash: bool = True) -> str:
    """The story's run: Kimi-K2.5 TP8 (MLA) on 96 GB cards. At 0.93, TP3 ends capture with 0.82 GiB
    free (P = 94.6 there, 94.9 on its peers), then dies of a CUDA OOM in prefill."""
    pre = {r: (94.6 if r == 3 else 94.9) for r in range(8)}
    after_worst = 0.82 + (0.93 - mfs) * 94.6
    kv_gb = 94.6 * mfs - 71.82
    tokens = int(kv_gb * 2**30 / 70272)
    out = [f"[2026-11-20 11:50:02] server_args=ServerArgs(model_path='/models/Kimi-K2.5', trust_remote_code=True, "
           f"mem_fraction_static={mfs}, chunked_prefill_size=8192, max_prefill_tokens=16384, tp_size=8, "
           "cuda_graph_max_bs=256, enable_hierarchical_cache=True, hicache_size=48, port=8000)"]
    out += [f"[2026-11-20 11:50:10 TP{r}] Init torch distributed begin." for r in range(8)]
    for r in range(8):
        out.append(f"[2026-11-20 11:50:13 TP{r}] Init torch distributed ends. elapsed=2.91 s, mem usage=1.12 GB")
        out.append(f"[2026-11-20 11:50:13 TP{r}] Load weight begin. avail mem={pre[r]:.2f} GB")
    out.append("Loading safetensors checkpoint shards: 100% Completed | 64/64 [04:10<00:00,  3.91s/it]")
    for r in range(8):
        out.append(f"[2026-11-20 11:54:25 TP{r}] Load weight end. elapsed=251.70 s, type=DeepseekV3ForCausalLM, "
                   f"dtype=torch.bfloat16, avail mem={pre[r] - 71.82:.2f} GB, mem usage=71.82 GB.")
    for r in range(8):
        d = pre[r] - 94.6
        out.append(f"[2026-11-20 11:54:27 TP{r}] KV Cache is allocated. #tokens: {tokens}, KV size: {kv_gb:.2f} GB")
        out.append(f"[2026-11-20 11:54:27 TP{r}] Memory pool end. avail mem={after_worst + 3.78 + d:.2f} GB")
        out.append(f"[2026-11-20 11:54:28 TP{r}] Capture cuda graph begin. This can take up to several minutes. "
                   f"avail mem={after_worst + 3.75 + d:.2f} GB")
    for r in range(8):
        out.append(f"[2026-11-20 11:54:42 TP{r}] Capture cuda graph end. Time elapsed: 13.98 s. mem usage=3.75 GB. "
                   f"avail mem={after_worst + pre[r] - 94.6:.2f} GB.")
    out += [
        f"[2026-11-20 11:54:43 TP0] max_total_num_tokens={tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        f"max_running_requests=4096, context_len=131072, available_gpu_mem={after_worst + 0.3:.2f} GB",
        "[2026-11-20 11:54:45] INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
        '[2026-11-20 11:54:47] INFO:     127.0.0.1:51750 - "POST /generate HTTP/1.1" 200 OK',
        "[2026-11-20 11:54:47] The server is fired up and ready to roll!",
    ]
    if crash:
        out += [
            "[2026-11-20 12:02:07 TP0] Prefill batch, #new-seq: 3, #new-token: 8192, #cached-token: 1024, token usage: 0.71, "
            "#running-req: 12, #queue-req: 17, input throughput (token/s): 18934.22, cuda graph: False",
            "[2026-11-20 12:02:08 TP3] Scheduler hit an exception: Traceback (most recent call last):",
            '  File ".../sglang/srt/managers/scheduler.py", line 3169, in run_scheduler_process',
            "    scheduler.event_loop_overlap()",
            '  File ".../sglang/srt/model_executor/model_runner.py", line 2359, in forward_extend',
            "    return self.model.forward(",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 224.00 MiB. GPU 3 has a total capacity of "
            "95.00 GiB of which 145.56 MiB is free. Including non-PyTorch memory, this process has 94.80 GiB memory in "
            "use. Of the allocated memory 91.83 GiB is allocated by PyTorch, with 3.62 GiB allocated in private pools "
            "(e.g., CUDA Graphs), and 1.03 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
            "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
            "See documentation for Memory Management  "
            "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
            "",
            "[2026-11-20 12:02:08] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
            "Killed",
        ]
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def story_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("logs") / "kimi-0.93.log"
    p.write_text(kimi_log())
    return p


def test_story_json(story_log: Path) -> None:
    r = cockpit("diagnose", "--json", str(story_log))
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert out["format"] == "sglang-0.5.9" and out["phase"] == "crashed"
    assert out["crash"]["kind"] == "cuda_oom"
    assert out["crash"]["phase"] == "prefill"
    assert out["crash"]["rank"] == "TP3"
    assert out["min_headroom_gb"] == pytest.approx(0.82)
    assert len(out["ranks"]) == 8
    changes = [(f["id"], c) for f in out["findings"] for c in f["changes"]]
    mfs = [c for _id, c in changes if c["flag"] == "--mem-fraction-static"]
    assert mfs and mfs[0] == {"flag": "--mem-fraction-static", "from": 0.93, "to": 0.88}
    first = out["findings"][0]
    assert first["severity"] == "critical"
    assert first["predicted"]["headroom_gb"] == pytest.approx(5.5, abs=0.1)
    assert first["predicted"]["max_total_num_tokens"] < out["max_total_num_tokens"]
    assert {f["id"] for f in out["findings"]} >= {"oom_crash", "low_headroom_after_graph_capture"}


def test_story_text(story_log: Path) -> None:
    r = cockpit("diagnose", str(story_log))
    assert r.returncode == 1
    text = r.stdout
    assert "CRASH cuda_oom in prefill on TP3" in text
    assert "--mem-fraction-static 0.93 → 0.88" in text
    assert "TP3" in text and "0.82" in text and "◀ worst" in text
    assert "FREE AFTER CAPTURE" in text


def test_stdin_and_target(story_log: Path) -> None:
    r = cockpit("diagnose", "--json", "--target-headroom-gb", "3.0", "-", stdin=story_log.read_bytes())
    assert r.returncode == 1
    out = json.loads(r.stdout)
    f = next(f for f in out["findings"] if f["id"] == "oom_crash")
    assert f["changes"][0]["to"] == 0.90  # 0.93 − (3.0 − 0.82)/94.6 = 0.907 → 0.90


def test_healthy_run_exits_0(tmp_path: Path) -> None:
    log = tmp_path / "ok.log"
    log.write_text(kimi_log(0.88, crash=False))
    r = cockpit("diagnose", "--json", str(log))
    assert r.returncode == 0, r.stdout
    out = json.loads(r.stdout)
    assert out["crash"] is None and out["phase"] == "ready"
    assert "headroom_ok" in {f["id"] for f in out["findings"]}


def test_two_logs_in_order(tmp_path: Path) -> None:
    text = kimi_log()
    cut = text.index("[2026-11-20 11:54:45]")
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(text[:cut])
    b.write_text(text[cut:])
    out = json.loads(cockpit("diagnose", "--json", str(a), str(b)).stdout)
    assert out["crash"]["rank"] == "TP3"


@pytest.mark.parametrize("args", [["/nonexistent/sglang.log"], ["-", "-"], ["--target-headroom-gb", "-1", "x.log"]])
def test_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str]) -> None:
    r = cockpit("diagnose", *args, stdin=b"", cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_directory_is_bad_input(tmp_path: Path) -> None:
    r = cockpit("diagnose", str(tmp_path))
    assert r.returncode == 2 and "is a directory" in r.stderr


# ---- issue 11: honest about what it cannot read; HiCache what-ifs ----------------------------------

README = Path(__file__).resolve().parents[2] / "README.md"
DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize("kind", ["readme", "empty", "binary", "prose-with-error-words"])
def test_unrecognised_input_exits_2_naming_the_file(tmp_path: Path, kind: str) -> None:
    if kind == "readme":
        path = README
    else:
        path = tmp_path / f"{kind}.log"
        if kind == "empty":
            path.write_bytes(b"")
        elif kind == "binary":
            path.write_bytes(bytes(range(256)) * 64)
        else:
            path.write_text("Notes\n\nA grep for `Error|OOM` misses `CUDA out of memory` and `RuntimeError`.\n")
    for args in (["diagnose", str(path)], ["diagnose", "--json", str(path)]):
        r = cockpit(*args)
        assert r.returncode == 2, (kind, r.stdout, r.stderr)
        assert r.stdout == "" and "Traceback" not in r.stderr
        lines = r.stderr.strip().splitlines()
        # The README's opening reads a little like SGLang's log, so that is the engine it was read
        # as; the rest read as no engine's at all, and the message names every engine it is not.
        engines = "SGLang" if kind == "readme" else "SGLang or vLLM"
        assert len(lines) == 1 and f"no {engines} log lines recognised in {path} (" in lines[0], lines
        assert "lines read" in lines[0]


def test_an_unrecognised_second_log_names_the_engine_the_first_proved(tmp_path: Path) -> None:
    """The engine is decided by the first log; a later file with none of its lines is refused in
    that engine's name, whichever engine it is."""
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    data = Path(__file__).resolve().parents[1] / "data"
    for log, engine in ((data / "vllm-0.33.0-port-in-use.log", "vLLM"),
                        (data / "sglang-0.5.9-llama70b-port-in-use.log", "SGLang")):
        r = cockpit("diagnose", str(log), str(empty))
        assert r.returncode == 2 and r.stdout == "", r.stderr
        assert f"no {engine} log lines recognised in {empty} (0 lines read)" in r.stderr


def test_the_engines_own_advice_is_quoted_in_its_name() -> None:
    from cockpit.commands._render import render_state
    from cockpit.core.state import RunState

    for backend, engine in (("sglang", "SGLang"), ("vllm", "vLLM")):
        text = render_state(RunState(backend=backend, engine_advice=["Try a smaller batch."]), [])
        assert f"{engine}'s own advice: Try a smaller batch." in text.splitlines()


def test_partly_recognised_log_says_how_much(tmp_path: Path) -> None:
    noise = "".join(f"some other program's line {i}\n" for i in range(300))
    log = tmp_path / "mixed.log"
    log.write_text(noise + kimi_log(0.88, crash=False))
    r = cockpit("diagnose", str(log))
    assert r.returncode == 0, r.stderr
    assert "note: recognised" in r.stdout and "the rest was skipped" in r.stdout
    out = json.loads(cockpit("diagnose", "--json", str(log)).stdout)
    assert out["lines"]["read"] == 300 + kimi_log(0.88, crash=False).count("\n")
    assert 0 < out["lines"]["recognised"] < out["lines"]["read"]


def test_healthy_log_prints_its_table_not_no_findings(tmp_path: Path) -> None:
    log = tmp_path / "ok.log"
    log.write_text(kimi_log(0.88, crash=False))
    r = cockpit("diagnose", str(log))
    assert r.returncode == 0 and "TP3" in r.stdout and "headroom_ok" in r.stdout


def test_hicache_what_if_from_a_log_alone() -> None:
    """A SIGKILL after every rank's `Allocating … GB host memory`: without the host's memory the
    finding says what it needs and what it would compute; with it, the size that fits."""
    log = str(DATA / "sglang-0.5.9-kimi-host-oom-killed.log")
    bare = json.loads(cockpit("diagnose", "--json", log).stdout)
    f = next(f for f in bare["findings"] if f["id"] == "hicache_host_memory")
    assert f["changes"] == [] and "--host-mem-gb" in f["message"] and "⌊(G − 40" in f["message"]
    r = cockpit("diagnose", "--json", "--host-mem-gb", "449", "--gpus", "8", log)
    assert r.returncode == 1
    f = next(f for f in json.loads(r.stdout)["findings"] if f["id"] == "hicache_host_memory")
    assert f["changes"] == [{"flag": "--hicache-size", "from": 300.0, "to": 49}]
    assert "⌊(449 − 40 − 10.7) / 8⌋ = 49 GB" in f["message"]


@pytest.mark.parametrize("args", [["--host-mem-gb", "-5"], ["--gpu-mem-gb", "0"], ["--gpus", "0"]])
def test_what_if_values_are_checked(args: list[str]) -> None:
    r = cockpit("diagnose", *args, str(DATA / "sglang-0.5.9-kimi-host-oom-killed.log"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and args[0] in r.stderr


_GB_FIGURE = __import__("re").compile(r"\d(?:\.\d+)? ?GB\b")


def test_findings_say_gib_for_gpu_memory_everywhere() -> None:
    """Issue 17, defect 12: one unit, GiB as the engines print it. A figure in "GB" is allowed only
    where it is the host's (HiCache's `--hicache-size` and the host RAM it is sized against are
    decimal GB) or quotes the engine's own line."""
    from cockpit.backends import detect_backend, get_backend
    data = Path(__file__).resolve().parents[1] / "data"
    logs = sorted(data.glob("*.log")) + sorted((data / "real").glob("*/*.log"))
    assert len(logs) > 30
    checked = 0
    for log in logs:
        b = get_backend(detect_backend(log.read_bytes()[:65536]))
        st = b.logs.read(log)
        for f in b.doctor.diagnose(st):
            checked += 1
            text = f.message
            quoted = {q for q in (st.crash.message if st.crash else "", *(st.crash.decisive_lines if st.crash else ()))}
            for q in quoted:
                text = text.replace(q, "")
            if "hicache" in f.id or "--hicache-size" in text:
                continue  # the host's pool and RAM: decimal GB, the flag's unit (the text says so)
            assert _GB_FIGURE.search(text) is None, (log.name, f.id, f.message)
    assert checked > 30


@pytest.mark.parametrize(("flag", "unit"), [("--gpu-mem-gb", "GiB"), ("--host-mem-gb", "GB")])
def test_what_if_bounds_name_each_flags_unit(story_log: Path, flag: str, unit: str) -> None:
    out = cockpit("diagnose", str(story_log), flag, "-1")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.rstrip().endswith(f" {unit}"), out.stderr
