"""Every golden log, parsed and reduced: phase, per-rank memory, the crash — real values."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.backends.sglang.logparse import SGLangLogParser, read_log
from cockpit.core import events as ev
from cockpit.core.linesplit import ByteReader
from cockpit.core.reducer import apply
from cockpit.core.state import CRASH_KINDS, CRASH_PHASES, PHASES, RunState

DATA = Path(__file__).resolve().parents[1] / "data"


def line_of(name: str, needle: str, nth: int = 1) -> int:
    """1-based line number of the nth line of a golden log containing `needle` (counted from the file)."""
    seen = 0
    with open(DATA / name, "rb") as f:
        for i, raw in enumerate(f, 1):
            if needle.encode() in raw:
                seen += 1
                if seen == nth:
                    return i
    raise AssertionError(f"{needle!r} not in {name}")


def state_of(name: str) -> RunState:
    return read_log(DATA / name)


# name: (format, phase, crash (kind, phase, rank, decisive needle) or None)
GOLDEN: dict[str, tuple[str, str, tuple[str, str, str | None, str] | None]] = {
    "sglang-0.5.9-llama70b-tp8-healthy.log": ("sglang-0.5.9", "ready", None),
    "sglang-0.5.23-llama70b-tp8-healthy.log": ("sglang-0.5.23", "ready", None),
    "sglang-0.5.9-llama70b-tp8-low-headroom.log": ("sglang-0.5.9", "ready", None),
    "sglang-0.5.9-kimi-0.93-prefill-oom.log": ("sglang-0.5.9", "crashed",
                                               ("cuda_oom", "prefill", "TP3", "torch.OutOfMemoryError")),
    "sglang-0.5.23-kimi-0.93-prefill-oom.log": ("sglang-0.5.23", "crashed",
                                                ("cuda_oom", "prefill", "TP3", "torch.OutOfMemoryError")),
    "sglang-0.5.9-kimi-0.88-healthy.log": ("sglang-0.5.9", "ready", None),
    "sglang-0.5.23-kimi-0.88-healthy.log": ("sglang-0.5.23", "ready", None),
    "sglang-0.5.9-llama70b-graph-capture-oom.log": ("sglang-0.5.9", "crashed",
                                                    ("graph_capture_oom", "graph_capture", "TP5", "torch.OutOfMemoryError")),
    "sglang-0.5.23-llama70b-graph-capture-oom.log": ("sglang-0.5.23", "crashed",
                                                     ("graph_capture_oom", "graph_capture", "TP5", "torch.OutOfMemoryError")),
    "sglang-0.5.9-llama70b-kv-pool-exhausted-prefill.log": ("sglang-0.5.9", "crashed",
                                                            ("kv_pool_exhausted", "prefill", "TP0", "Prefill out of memory")),
    "sglang-0.5.23-llama70b-kv-pool-exhausted-decode.log": ("sglang-0.5.23", "crashed",
                                                            ("kv_pool_exhausted", "decode", "TP0", "Decode out of memory")),
    "sglang-0.5.9-llama70b-init-not-enough-memory.log": ("sglang-0.5.9", "crashed",
                                                         ("init_not_enough_memory", "startup", "TP0", "Not enough memory")),
    "sglang-0.5.23-kimi-init-not-enough-memory.log": ("sglang-0.5.23", "crashed",
                                                      ("init_not_enough_memory", "startup", "TP2", "Loaded weights leave")),
    "sglang-0.5.9-llama70b-hicache-host-memory.log": ("sglang-0.5.9", "crashed",
                                                      ("hicache_host_memory", "startup", "TP6", "Not enough host memory")),
    "sglang-0.5.23-llama70b-hicache-host-memory.log": ("sglang-0.5.23", "crashed",
                                                       ("hicache_host_memory", "startup", "TP6", "Not enough host memory")),
    "sglang-0.5.9-llama70b-hicache-smaller-than-device.log": ("sglang-0.5.9", "crashed",
                                                              ("host_cache_smaller_than_device", "startup", "TP0",
                                                               "The host memory should be larger")),
    "sglang-0.5.9-kimi-host-oom-killed.log": ("sglang-0.5.9", "crashed",
                                              ("hicache_host_memory", "startup", "TP6", "Rank 6 scheduler is dead")),
    "sglang-0.5.23-kimi-host-oom-killed.log": ("sglang-0.5.23", "crashed",
                                               ("hicache_host_memory", "startup", "TP6", "Rank 6 scheduler died")),
    "sglang-0.5.9-llama70b-nccl-watchdog-timeout.log": ("sglang-0.5.9", "crashed",
                                                        ("nccl_timeout", "decode", None, "Watchdog caught")),
    "sglang-0.5.9-llama70b-warmup-failed.log": ("sglang-0.5.9", "crashed",
                                                ("warmup_failed", "startup", None, "warmup error")),
    "sglang-0.5.9-llama70b-port-in-use.log": ("sglang-0.5.9", "crashed",
                                              ("port_in_use", "startup", None, "address already in use")),
    "sglang-0.5.9-qwen7b-single-gpu.log": ("sglang-0.5.9", "ready", None),
    "sglang-0.5.23-qwen7b-single-gpu.log": ("sglang-0.5.23", "ready", None),
    "sglang-0.5.9-deepseek-dp-attention.log": ("sglang-0.5.9", "ready", None),
    "sglang-0.5.9-llama405b-tp16-node1.log": ("sglang-0.5.9", "warmup", None),
}


def test_every_golden_log_is_listed() -> None:
    on_disk = {p.name for p in DATA.glob("sglang-*.log")}  # vLLM: tests/backends/test_vllm_golden.py
    assert on_disk == set(GOLDEN)
    readme = (DATA / "README.md").read_text()
    for name in GOLDEN:
        assert name in readme


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_phase_format_and_crash(name: str) -> None:
    fmt, phase, crash = GOLDEN[name]
    st = state_of(name)
    assert st.format == fmt
    assert st.phase == phase
    assert st.phase in PHASES
    assert st.lines_seen == (DATA / name).read_bytes().count(b"\n")
    if crash is None:
        assert st.crash is None
        return
    kind, cphase, rank, needle = crash
    assert st.crash is not None
    assert st.crash.kind == kind and kind in CRASH_KINDS
    assert st.crash.phase == cphase and cphase in CRASH_PHASES
    assert st.crash.rank == rank
    assert st.crash.line == line_of(name, needle)
    assert needle in st.crash.message
    assert st.crash.decisive_lines and any(needle in d for d in st.crash.decisive_lines)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_kimi_093_story(version: str) -> None:
    name = f"sglang-{version}-kimi-0.93-prefill-oom.log"
    st = state_of(name)
    assert list(st.ranks) == [f"TP{i}" for i in range(8)]
    tp3 = st.ranks["TP3"]
    assert tp3.pre_load_avail_gb == 94.60
    assert tp3.weights_gb == 71.82
    assert tp3.after_weights_avail_gb == 22.78
    assert tp3.kv_tokens == 246890 and tp3.kv_gb == 16.16
    assert tp3.avail_before_capture_gb == 4.57
    assert tp3.graph_gb == pytest.approx(3.75)
    assert tp3.avail_after_capture_gb == 0.82
    assert tp3.captures_done == (1 if version == "0.5.9" else 2)
    assert st.ranks["TP0"].avail_after_capture_gb == 1.22
    assert st.min_headroom_gb == 0.82 and st.worst_rank == "TP3"
    assert st.min_pre_load_avail_gb == 94.60
    assert st.memory_setting == ("mem_fraction_static", 0.93)
    assert st.server_args["tp_size"] == 8 and st.server_args["hicache_size"] == 48
    assert st.server_args["model_path"] == "/models/Kimi-K2.5"
    assert st.max_total_num_tokens == 246890 and st.context_len == 262144
    assert st.available_gpu_mem_gb == 1.22
    assert st.host_cache_gb_per_rank == 48.0 and len(st.host_cache_allocating_ranks) == 8
    assert st.ready_in_log and st.uvicorn_port == 8000
    assert st.crash is not None and st.crash.exit_code == 137
    assert any("SIGQUIT" in d for d in st.crash.decisive_lines)
    assert st.crash.decisive_lines[-1] == "Killed" or version == "0.5.23"
    assert st.peak_gen_throughput == pytest.approx(2879.31)
    assert st.last_batch_kind == "prefill"
    assert st.ranks["TP3"].timeline["capture_end"].startswith("20")


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_kimi_088_is_the_fix(version: str) -> None:
    st = state_of(f"sglang-{version}-kimi-0.88-healthy.log")
    tp3 = st.ranks["TP3"]
    assert tp3.avail_before_capture_gb == 9.26
    assert tp3.graph_gb == pytest.approx(3.75)
    assert tp3.avail_after_capture_gb == 5.51
    assert st.min_headroom_gb == 5.51
    assert st.max_total_num_tokens == 174617
    assert st.memory_setting == ("mem_fraction_static", 0.88)
    assert st.crash is None and st.phase == "ready"
    assert set(st.ranks["TP0"].timeline) >= {"init", "weights_begin", "weights_end", "kv_pool", "capture_begin",
                                              "capture_end", "ready"}


def test_healthy_llama_both_versions() -> None:
    a = state_of("sglang-0.5.9-llama70b-tp8-healthy.log")
    b = state_of("sglang-0.5.23-llama70b-tp8-healthy.log")
    assert a.memory_setting == ("mem_fraction_static", 0.818) and b.memory_setting == ("mem_fraction_static", 0.812)
    assert a.ranks["TP0"].kv_tokens == 1244811 and a.ranks["TP0"].kv_gb == pytest.approx(47.48)
    assert b.ranks["TP0"].kv_tokens == 1232509 and b.ranks["TP0"].kv_gb == pytest.approx(47.02)
    assert a.ranks["TP7"].graph_gb == 1.71 and b.ranks["TP7"].graph_gb == pytest.approx(2.20)
    assert a.min_headroom_gb == 12.20 and b.min_headroom_gb == 12.21
    assert a.ranks["TP0"].avail_before_capture_gb == 14.20 and b.ranks["TP0"].avail_before_capture_gb == 14.70
    assert b.ranks["TP0"].captures_done == 2
    assert a.uvicorn_port == 30000
    assert a.server_args["cuda_graph_max_bs"] == 512 and b.server_args["cuda_graph_max_bs_decode"] == 512
    assert a.server_args["max_running_requests"] is None and a.server_args["enable_dp_attention"] is False
    assert len(a.gen_throughput) == 5 and a.token_usage
    assert a.running_requests == 16 and a.queued_requests == 0


def test_low_headroom_worst_rank() -> None:
    st = state_of("sglang-0.5.9-llama70b-tp8-low-headroom.log")
    assert st.ranks["TP3"].avail_after_capture_gb == 1.44
    assert st.ranks["TP0"].avail_after_capture_gb == 1.91
    assert st.worst_rank == "TP3" and st.min_headroom_gb == 1.44
    assert st.available_gpu_mem_gb == 1.91
    assert st.max_total_num_tokens == 1515441


def test_host_oom_kill_keeps_the_exit_code() -> None:
    for version in ("0.5.9", "0.5.23"):
        st = state_of(f"sglang-{version}-kimi-host-oom-killed.log")
        assert st.crash is not None and st.crash.exit_code == -9
        assert st.host_cache_gb_per_rank == 300.0


def _dead_rank_6(oom_line: str | None = None) -> RunState:
    st = RunState()
    apply(st, ev.ServerArgs(1, "2026-01-01 00:00:00", None, {"tp_size": 8}, "ServerArgs"))
    apply(st, ev.WeightLoadBegin(2, "2026-01-01 00:00:01", "TP0", 78.0))
    apply(st, ev.RankDead(3, "2026-01-01 00:00:02", None, 6, None, "dead", "Rank 6 scheduler is dead."))
    apply(st, ev.ExitCode(4, "2026-01-01 00:00:02", None, -9))
    if oom_line is not None:
        apply(st, ev.OomKillLine(5, None, None, oom_line))
    return st


def test_a_sigkill_without_evidence_is_killed_by_signal_not_an_oom() -> None:
    st = _dead_rank_6()
    assert st.crash is not None
    assert (st.crash.kind, st.crash.rank, st.crash.exit_code, st.crash.phase) == ("killed_by_signal", "TP6", -9, "startup")
    assert st.crash.oom_evidence is None


def test_a_kernel_oom_line_after_the_sigkill_makes_it_host_oom_killed() -> None:
    line = "[Thu Jan  1 00:00:03 2026] Out of memory: Killed process 4242 (python3) total-vm:1000kB"
    st = _dead_rank_6(line)
    assert st.crash is not None
    assert (st.crash.kind, st.crash.rank, st.crash.exit_code, st.crash.phase) == ("host_oom_killed", "TP6", -9, "startup")
    assert st.crash.oom_evidence is not None and "Killed process 4242" in st.crash.oom_evidence


def test_not_enough_memory_events_carry_the_numbers() -> None:
    p = ByteReader(SGLangLogParser())
    evs = p.feed((DATA / "sglang-0.5.23-kimi-init-not-enough-memory.log").read_bytes()) + p.finish()
    nem = [e for e in evs if isinstance(e, ev.NotEnoughMemory)]
    assert len(nem) == 1
    assert (nem[0].setting, nem[0].suggested, nem[0].minimum_viable) == (0.5, 0.845, 0.8358)
    p = ByteReader(SGLangLogParser())
    evs = p.feed((DATA / "sglang-0.5.9-llama70b-init-not-enough-memory.log").read_bytes()) + p.finish()
    nem = [e for e in evs if isinstance(e, ev.NotEnoughMemory)]
    assert len(nem) == 1 and nem[0].setting == 0.2 and nem[0].minimum_viable is None


def test_kv_exhaustion_counts_retractions_and_tokens() -> None:
    st = state_of("sglang-0.5.9-llama70b-kv-pool-exhausted-prefill.log")
    assert st.retractions == 5
    p = ByteReader(SGLangLogParser())
    evs = p.feed((DATA / "sglang-0.5.23-llama70b-kv-pool-exhausted-decode.log").read_bytes()) + p.finish()
    ex = [e for e in evs if isinstance(e, ev.KvPoolExhausted)]
    assert ex[0].stage == "decode" and ex[0].tokens == 96 and ex[0].rank == "TP0"


def test_cuda_oom_sizes() -> None:
    p = ByteReader(SGLangLogParser())
    evs = p.feed((DATA / "sglang-0.5.9-kimi-0.93-prefill-oom.log").read_bytes())
    oom = [e for e in evs if isinstance(e, ev.CudaOom)]
    assert len(oom) == 1
    o = oom[0]
    assert o.gpu == 3 and o.requested_gib == 1.75 and o.total_gib == 94.97
    assert o.free_gib == pytest.approx(412.56 / 1024, abs=1e-3)


def test_hicache_value_error_numbers() -> None:
    p = ByteReader(SGLangLogParser())
    evs = p.feed((DATA / "sglang-0.5.9-llama70b-hicache-host-memory.log").read_bytes())
    hm = [e for e in evs if isinstance(e, ev.HostCacheShortOfMemory)]
    assert (hm[0].requested_gb, hm[0].free_gb) == (200.0, 128.41)
    st = state_of("sglang-0.5.9-llama70b-hicache-host-memory.log")
    assert st.host_cache_allocating_ranks == ["TP0", "TP2", "TP1", "TP4", "TP5"]


def test_single_gpu_is_rank_tp0() -> None:
    for version in ("0.5.9", "0.5.23"):
        st = state_of(f"sglang-{version}-qwen7b-single-gpu.log")
        assert list(st.ranks) == ["TP0"]
        r = st.ranks["TP0"]
        assert (r.pre_load_avail_gb, r.weights_gb, r.kv_tokens, r.avail_after_capture_gb) == (22.05, 14.25, 99072, 1.86)
        assert r.graph_gb == pytest.approx(0.31)
        assert st.max_total_num_tokens == 99072 and st.context_len == 32768
    st = state_of("sglang-0.5.23-qwen7b-single-gpu.log")
    assert st.last_ts is not None and "." in st.last_ts  # .mmm kept


def test_dp_attention_labels() -> None:
    st = state_of("sglang-0.5.9-deepseek-dp-attention.log")
    assert list(st.ranks) == [f"DP{i} TP{i} EP{i}" for i in range(8)]
    assert st.ranks["DP3 TP3 EP3"].avail_after_capture_gb == 5.11
    assert st.server_args["enable_dp_attention"] is True


def test_multinode_node1_ranks() -> None:
    st = state_of("sglang-0.5.9-llama405b-tp16-node1.log")
    assert list(st.ranks) == [f"TP{i}" for i in range(8, 16)]
    assert st.ranks["TP15"].avail_after_capture_gb == pytest.approx(13.10 - 0.29 - 1.52)
    assert not st.ready_in_log


def test_phases_move_forward_only() -> None:
    name = "sglang-0.5.23-kimi-0.88-healthy.log"
    st = RunState()
    p = ByteReader(SGLangLogParser())
    seen: list[str] = []
    for raw in (DATA / name).read_bytes().splitlines(keepends=True):
        for e in p.feed(raw):
            apply(st, e)
            if not seen or seen[-1] != st.phase:
                seen.append(st.phase)
    assert seen == ["loading", "kv_pool", "capturing", "warmup", "ready"]


def test_process_exit_from_the_supervisor() -> None:
    st = state_of("sglang-0.5.9-llama70b-tp8-healthy.log")
    apply(st, ev.ProcessExited(0, None, None, 0))
    assert st.phase == "stopped" and st.crash is None
    st = state_of("sglang-0.5.9-llama70b-tp8-healthy.log")
    apply(st, ev.ProcessExited(0, None, None, 1))
    assert st.phase == "crashed" and st.crash is not None
    assert (st.crash.kind, st.crash.phase, st.crash.exit_code, st.crash.line) == ("unknown", "decode", 1, 0)
    # after a logged crash the exit only adds its code
    st = state_of("sglang-0.5.9-llama70b-kv-pool-exhausted-prefill.log")
    apply(st, ev.ProcessExited(0, None, None, 137))
    assert st.crash is not None and st.crash.kind == "kv_pool_exhausted" and st.crash.exit_code == 137


def test_new_run_in_the_same_log_starts_over() -> None:
    text = (DATA / "sglang-0.5.9-kimi-0.93-prefill-oom.log").read_bytes()
    text += (DATA / "sglang-0.5.9-kimi-0.88-healthy.log").read_bytes()
    p = ByteReader(SGLangLogParser())
    st = RunState()
    for e in p.feed(text) + p.finish():
        apply(st, e)
    assert st.crash is None and st.phase == "ready" and st.min_headroom_gb == 5.51
    assert st.lines_seen == text.count(b"\n")


def test_reducer_is_deterministic_and_copy_safe() -> None:
    a = state_of("sglang-0.5.9-kimi-0.93-prefill-oom.log")
    b = state_of("sglang-0.5.9-kimi-0.93-prefill-oom.log")
    assert a.to_json() == b.to_json()
    c = a.copy()
    assert c.to_json() == a.to_json()


def test_node1_dump_does_not_restart_the_run() -> None:
    st = state_of("sglang-0.5.9-kimi-0.93-prefill-oom.log")
    before = st.to_json()
    args = dict(st.server_args, node_rank=1)
    apply(st, ev.ServerArgs(5000, "2026-02-24 12:00:00", None, args, "ServerArgs"))
    assert st.to_json() == before


def test_log_warnings_and_timeline() -> None:
    p = ByteReader(SGLangLogParser())
    text = (
        b"[2026-10-31 09:12:06 TP0] Load weight begin. avail mem=78.21 GB\n"
        b"[2026-10-31 09:12:06 TP3] The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
        b"pre_model_load_memory=78.2, local_gpu_memory=87.1, local_gpu_memory * 0.9=78.39\n"
        b"[2026-10-31 09:13:21 TP0] KV pool holds 60000 tokens, fewer than --context-length 262144. One full-length "
        b"request cannot fit, so long requests will be refused or truncated at serving time.\n"
    )
    st = RunState()
    for e in p.feed(text):
        apply(st, e)
    assert len(st.log_warnings) == 2
    assert st.log_warnings[0].startswith("TP3: The memory capacity is unbalanced")
    assert st.log_warnings[1] == "KV pool holds 60000 tokens, fewer than --context-length 262144"
    assert st.ranks["TP0"].timeline == {"weights_begin": "2026-10-31 09:12:06"}
    assert st.phase == "loading" and st.phase_since == "2026-10-31 09:12:06"


def test_process_exit_before_the_log_tells_why() -> None:
    """The supervisor may see the pid die before it reads the last log lines: the log still decides."""
    st = state_of("sglang-0.5.9-kimi-0.88-healthy.log")
    apply(st, ev.ProcessExited(0, None, None, 137))
    # alone, the exit says SIGKILL and nothing about who sent it
    assert st.crash is not None and st.crash.kind == "killed_by_signal" and st.crash.exit_code == 137
    p = ByteReader(SGLangLogParser())
    tail = (DATA / "sglang-0.5.9-kimi-0.93-prefill-oom.log").read_bytes()
    tail = tail[tail.index(b"[2026-02-24 11:51:26 TP3] Scheduler hit"):]
    for e in p.feed(tail) + p.finish():
        apply(st, e)
    assert (st.crash.kind, st.crash.phase, st.crash.rank, st.crash.exit_code) == ("cuda_oom", "prefill", "TP3", 137)


def test_two_nodes_into_one_state() -> None:
    st = state_of("sglang-0.5.9-llama70b-tp8-healthy.log")
    read_log(DATA / "sglang-0.5.9-llama405b-tp16-node1.log", st)
    assert list(st.ranks) == [f"TP{i}" for i in range(16)]
    assert st.phase == "ready" and st.crash is None
    assert st.ranks["TP12"].avail_after_capture_gb == pytest.approx(11.29)


def test_crash_rank_comes_from_the_prefix_not_the_gpu_index() -> None:
    """On node 1 of a TP16 run, TP12 runs on local GPU 4: the OOM text says `GPU 4`."""
    text = (DATA / "sglang-0.5.9-llama405b-tp16-node1.log").read_bytes() + (
        b"[2026-03-09 09:20:00 TP12] Scheduler hit an exception: Traceback (most recent call last):\n"
        b'  File "/opt/sglang/python/sglang/srt/model_executor/model_runner.py", line 2380, in forward_decode\n'
        b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 4 has a total capacity of "
        b"79.19 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.10 GiB memory in use.\n"
    )
    p = ByteReader(SGLangLogParser())
    st = RunState()
    evs = p.feed(text) + p.finish()
    for e in evs:
        apply(st, e)
    oom = [e for e in evs if isinstance(e, ev.CudaOom)]
    assert oom[0].gpu == 4 and oom[0].requested_gib == 2.0 and oom[0].free_gib == 1.06
    assert st.crash is not None
    assert (st.crash.kind, st.crash.phase, st.crash.rank, st.crash.line) == ("cuda_oom", "decode", "TP12", text.count(b"\n"))


def test_a_copy_is_independent_and_shares_the_series_points() -> None:
    """The supervisor copies the state for every snapshot (a pickle round trip, deepcopy where
    pickle cannot carry something): the copy equals the state, changing one never changes the
    other, and the series' deques are new while their points (never changed) are shared."""
    import copy as copy_module

    a = state_of("sglang-0.5.9-kimi-0.93-prefill-oom.log")
    assert a.gen_throughput and a.ranks
    for reducer_memory in (a.reducer_memory, lambda: None):  # a lambda: pickle refuses, deepcopy copies
        a.reducer_memory = reducer_memory
        c = a.copy()
        assert c == a and c.to_json() == a.to_json()
        assert c.gen_throughput is not a.gen_throughput and c.gen_throughput.maxlen == a.gen_throughput.maxlen
        assert all(p is q for p, q in zip(c.gen_throughput, a.gen_throughput, strict=True))
        rank = next(iter(a.ranks))
        c.ranks[rank].kv_gb = -1.0
        c.gen_throughput.clear()
        c.server_args["tp_size"] = 99
        assert a.ranks[rank].kv_gb != -1.0 and a.gen_throughput and a.server_args.get("tp_size") != 99
        assert c.crash is not a.crash and c.crash == a.crash
    # the same result as the deep copy it replaces
    memo = {id(d): copy_module.copy(d) for d in (a.gen_throughput, a.input_throughput, a.token_usage)}
    assert a.copy() == copy_module.deepcopy(a, memo)
