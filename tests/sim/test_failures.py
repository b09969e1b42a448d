"""Every failure mode the simulator reproduces, each checked in the log text SGLang prints and in
the classification the backend's parser gives it. High --sim-speed keeps each run to seconds."""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import threading
import time

import pytest

from cockpit.backends.sglang.logparse import read_log

from .conftest import KIMI

pytestmark = pytest.mark.timeout(60)

SIGKILLED = -signal.SIGKILL  # the main process killed its own tree (137 in a shell)


def crash_of(run):
    state = read_log(run.log_path)
    assert state.crash is not None, run.text()[-2000:]
    return state, state.crash


def test_graph_capture_oom(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.97"])
    assert run.wait_exit() == SIGKILLED
    text = run.text()
    assert "Exception: Capture cuda graph failed: CUDA out of memory." in text
    assert "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)" in text
    assert "Received sigquit from a child process. It usually means the child failed." in text
    _, crash = crash_of(run)
    assert (crash.kind, crash.phase) == ("graph_capture_oom", "graph_capture")


def test_graph_capture_oom_0523_names_the_new_flag(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.93", "--sim-version", "0.5.23"])
    assert run.wait_exit() == SIGKILLED
    text = run.text()
    # the prefill graphs (1.1 GiB) still fit; the decode graphs (3.75 GiB) do not
    assert "Capture target prefill CUDA graph end." in text
    assert "Exception: Capture cuda graph failed: CUDA out of memory." in text
    assert "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)" in text
    assert "kill_process_tree called: parent_pid=" in text
    _, crash = crash_of(run)
    assert crash.kind == "graph_capture_oom"


def test_init_not_enough_memory(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.75"])  # P·0.75 = 70.95 GiB < W = 71.82
    assert run.wait_exit() == SIGKILLED
    assert "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: " in run.text()
    _, crash = crash_of(run)
    assert (crash.kind, crash.phase) == ("init_not_enough_memory", "startup")


def test_init_not_enough_memory_0523(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.75", "--sim-version", "0.5.23"])
    assert run.wait_exit() == SIGKILLED
    text = run.text()
    assert "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.75." in text
    assert "minimum viable = 1 - available/pre = " in text
    assert crash_of(run)[1].kind == "init_not_enough_memory"


def test_hicache_per_process_check_fails(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.88", "--enable-hierarchical-cache", "--hicache-size", "500",
               "--sim-host-mem-gb", "449"])
    assert run.wait_exit() == SIGKILLED
    text = run.text()
    assert re.search(r"TP0\] Scheduler hit an exception: Traceback", text)
    assert ("ValueError: Not enough host memory available. Requesting 500.00 GB but only have 438.26 GB free. "
            "Please reduce the size of the hierarchical cache.") in text
    assert "in init_cache_with_memory_pool" in text
    _, crash = crash_of(run)
    assert crash.kind == "hicache_host_memory"


def test_hicache_oversubscribed_host_gets_a_rank_oom_killed(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.88", "--enable-hierarchical-cache", "--hicache-size", "300",
               "--sim-host-mem-gb", "449"])
    assert run.wait_exit() == 1
    text = run.text()
    assert len(re.findall(r"Allocating 300\.00 GB host memory for hierarchical KV cache\.", text)) == 8
    m = re.search(r"\] Rank (\d) scheduler is dead\. Please check if there are relevant logs\.\n.*\] Exit code: -9\n", text)
    assert m, text[-1500:]
    assert text.rstrip().endswith("EOFError")
    assert "Scheduler hit an exception" not in text  # the OOM-killer leaves no Python trace
    _, crash = crash_of(run)
    # the parser files an OOM-kill during HiCache allocation under the HiCache cause
    assert crash.kind in ("host_oom_killed", "hicache_host_memory")
    assert crash.exit_code == -9


def test_hicache_0523_fails_on_the_per_rank_share(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.88", "--enable-hierarchical-cache", "--hicache-size", "300",
               "--sim-host-mem-gb", "449", "--sim-version", "0.5.23"])
    assert run.wait_exit() == SIGKILLED
    assert "Requesting 300.00 GB but only have 54.78 GB free." in run.text()
    assert crash_of(run)[1].kind == "hicache_host_memory"


def test_hicache_that_fits_allocates_on_every_rank(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.88", "--enable-hierarchical-cache", "--hicache-size", "48",
               "--sim-host-mem-gb", "449"])
    run.wait_for("The server is fired up and ready to roll!")
    state = read_log(run.log_path)
    assert state.phase == "ready" and state.crash is None
    assert state.host_cache_gb_per_rank == 48.0
    assert len(state.host_cache_allocating_ranks) == 8
    host = json.loads((run.gpu_dir / "host.json").read_text())
    assert host["pid"] == run.pid and host["mem_total_gb"] == 449
    assert host["mem_available_gb"] == pytest.approx(449 - 8 * 48)


def test_kv_pool_full_retracts_requests_and_keeps_serving(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.88", "--max-total-tokens", "20000", "--sim-traffic", "burst"],
              speed=300)
    run.wait_for(r"KV cache pool is full\. Retract requests\. #retracted_reqs: \d+, #new_tokens_gained: \d+, "
                 r"#new_token_ratio: [\d.]+ -> [\d.]+", timeout=30)
    assert run.proc.poll() is None
    state = read_log(run.log_path)
    assert state.crash is None and state.retractions >= 1
    assert state.max_total_num_tokens == 20000


def test_kv_pool_exhausted_with_nothing_to_retract_crashes(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.88", "--max-total-tokens", "2000"])
    run.wait_for("The server is fired up and ready to roll!")

    def client() -> None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", run.port, timeout=20)
            body = {"input_ids": list(range(1500)), "sampling_params": {"max_new_tokens": 1000}}
            conn.request("POST", "/generate", body=json.dumps(body))
            conn.getresponse().read()
        except OSError:
            pass  # the server dies under us: that is the point

    t = threading.Thread(target=client, daemon=True)
    t.start()
    assert run.wait_exit() == SIGKILLED
    text = run.text()
    assert "RuntimeError: Decode out of memory. Try to lower your batch size." in text
    assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." in text
    assert crash_of(run)[1].kind == "kv_pool_exhausted"


def test_port_in_use(sim) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        port = blocker.getsockname()[1]
        run = sim([*KIMI, "--mem-fraction-static", "0.88"], port=port)
        assert run.wait_exit() == 1
    assert f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): address already in use" in run.text()
    assert crash_of(run)[1].kind == "port_in_use"
    assert run.children() == []


def test_sigterm_stops_everything_cleanly(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.88", "--sim-traffic", "steady"])
    run.wait_for("The server is fired up and ready to roll!")
    assert len(run.proc_files()) == 8
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait_exit(10) in (0, -signal.SIGTERM)
    assert run.proc_files() == []
    assert run.children() == []


def test_sigterm_to_the_group_while_loading(sim) -> None:
    import os

    run = sim([*KIMI, "--mem-fraction-static", "0.88"], speed=20)
    run.wait_for(r"Load weight begin")
    os.killpg(run.pid, signal.SIGTERM)
    assert run.wait_exit(10) in (0, -signal.SIGTERM)
    assert run.proc_files() == []


def test_sigkill_of_the_group_leaves_dead_files_behind(sim) -> None:
    import os

    from cockpit.sim import gpus

    run = sim([*KIMI, "--mem-fraction-static", "0.88"])
    run.wait_for("The server is fired up and ready to roll!")
    os.killpg(run.pid, signal.SIGKILL)
    run.wait_exit(10)
    files = run.proc_files()
    assert len(files) == 8
    deadline = time.monotonic() + 5
    while gpus.read_procs(run.gpu_dir) and time.monotonic() < deadline:
        time.sleep(0.05)  # the orphaned ranks are reaped by init a moment later
    assert gpus.read_procs(run.gpu_dir) == []
    assert gpus.free_gib(run.gpu_dir, 3, 97887) == pytest.approx(97887 / 1024)


def test_burst_at_093_kills_the_worst_rank_even_at_very_high_speed(sim) -> None:
    # every rank lacks the memory for a full chunk; the one with the least (TP3) runs out first
    run = sim([*KIMI, "--mem-fraction-static", "0.93", "--sim-traffic", "burst"], speed=1000)
    assert run.wait_exit(30) == SIGKILLED
    _, crash = crash_of(run)
    assert (crash.kind, crash.phase, crash.rank) == ("cuda_oom", "prefill", "TP3")
    assert len(re.findall(r"Scheduler hit an exception", run.text())) == 1


def test_0523_aborts_the_last_request_instead_of_crashing(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.88", "--max-total-tokens", "2000", "--sim-version", "0.5.23"])
    run.wait_for("The server is fired up and ready to roll!")
    conn = http.client.HTTPConnection("127.0.0.1", run.port, timeout=20)
    conn.request("POST", "/generate", body=json.dumps({"input_ids": list(range(1500)),
                                                       "sampling_params": {"max_new_tokens": 1000}}))
    r = conn.getresponse()
    body = json.loads(r.read())
    assert r.status == 500
    assert "Out of memory even after retracting all other requests in the decode batch." in body["error"]["message"]
    assert re.search(r"TP0\] retract_decode: aborted last request \w+ due to OOM", run.text())
    assert run.proc.poll() is None
    # an input longer than the pool is refused up front
    conn = http.client.HTTPConnection("127.0.0.1", run.port, timeout=20)
    conn.request("POST", "/generate", body=json.dumps({"input_ids": list(range(2500))}))
    r = conn.getresponse()
    assert r.status == 400 and "exceeds the maximum allowed length (1999 tokens)" in r.read().decode()


def test_attention_workspace_oom_at_startup(sim) -> None:
    run = sim([*KIMI, "--mem-fraction-static", "0.985"])
    assert run.wait_exit() == SIGKILLED
    assert "in init_attention_backend" in run.text()
    _, crash = crash_of(run)
    assert crash.kind in ("cuda_oom", "graph_capture_oom") and crash.phase in ("startup", "graph_capture")


def test_weights_that_do_not_fit_fail_while_loading(sim) -> None:
    run = sim(["--model-path", "meta-llama/Llama-3.1-70B-Instruct", "--sim-gpu", "h100"])
    assert run.wait_exit() == SIGKILLED
    text = run.text()
    assert "in load_model" in text and "torch.OutOfMemoryError: CUDA out of memory." in text
    assert "Load weight end" not in text
    _, crash = crash_of(run)
    assert (crash.kind, crash.phase) == ("cuda_oom", "startup")
