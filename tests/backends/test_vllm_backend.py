"""vLLM flags, argv and the memory advice's invariants (hypothesis): the verb matches the direction,
a change never proposes the current value, the predicted effect follows Δutil = ΔB / total."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cockpit.backends import detect_backend, get_backend
from cockpit.backends.base import FlagError
from cockpit.backends.vllm.command import build_argv, flag_diff, parse_overrides
from cockpit.backends.vllm.diagnosis import diagnose
from cockpit.backends.vllm.flags import canonical, default_util, parse_serve_args
from cockpit.backends.vllm.memory import GIB, lower_util_for, raise_util_for
from cockpit.core.profile import Profile
from cockpit.core.state import Crash, RunState


def profile(**server: object) -> Profile:
    return Profile.model_validate({"name": "v", "backend": "vllm", "version": "0.33.0", "server": server})


# ---- flags -------------------------------------------------------------------------------------


def test_serve_positional_aliases_and_bytes() -> None:
    args = parse_serve_args(["Qwen/Qwen3-32B", "-tp", "2", "--kv-cache-memory=20G", "--max-model-len", "32k",
                             "-cc.cudagraph_mode=FULL_DECODE_ONLY", "--no-enable-prefix-caching"])
    assert args["model"] == "Qwen/Qwen3-32B"
    assert args["tensor_parallel_size"] == 2
    assert args["kv_cache_memory_bytes"] == 20 * 2**30  # argparse prefix of --kv-cache-memory-bytes; G = GiB
    assert args["max_model_len"] == 32000
    assert args["compilation_config"] == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    assert args["enable_prefix_caching"] is False


@pytest.mark.parametrize("flag,new", [("--swap-space", "drop it"), ("--cuda-graph-sizes", "--cudagraph-capture-sizes"),
                                      ("--max-seq-len-to-capture", "--max-cudagraph-capture-size")])
def test_renamed_and_removed_flags_name_the_new_way(flag: str, new: str) -> None:
    with pytest.raises(FlagError) as exc:
        parse_serve_args(["m", flag, "4"], "0.33.0")
    assert exc.value.flag == flag and new in str(exc.value)
    with pytest.raises(FlagError):
        canonical(flag.lstrip("-"), "0.33.0")


def test_versions_differ() -> None:
    assert parse_serve_args(["m", "--swap-space", "4"], "0.16.0") == {"model": "m", "swap_space": 4.0}
    assert default_util("0.16.0") == 0.9 and default_util("0.33.0") == 0.92
    assert canonical("tp").name == "--tensor-parallel-size"
    with pytest.raises(FlagError, match="ambiguous"):
        canonical("max-num")


def test_argv_is_vllm_serve() -> None:
    p = profile(model="/models/Qwen3-32B", tp=2, **{"gpu-memory-utilization": 0.95, "enforce-eager": True, "port": 8011})
    assert build_argv(p) == ["vllm", "serve", "/models/Qwen3-32B", "--tensor-parallel-size", "2",
                             "--gpu-memory-utilization", "0.95", "--enforce-eager", "--port", "8011"]
    p2 = Profile.model_validate({"name": "v", "backend": "vllm", "program": ["cockpit", "sim", "--sim-backend", "vllm", "serve"],
                                 "server": {"model": "m"}})
    assert build_argv(p2, {"gpu-memory-utilization": 0.9})[:6] == ["cockpit", "sim", "--sim-backend", "vllm", "serve", "m"]


def test_profile_errors_name_the_key() -> None:
    with pytest.raises(FlagError, match=r"server\.swap-space.*no longer"):
        build_argv(profile(model="m", **{"swap-space": 4}))
    with pytest.raises(FlagError, match=r"server\.model is required"):
        build_argv(profile(tp=2))
    with pytest.raises(FlagError, match="invalid float"):
        build_argv(profile(model="m", **{"gpu-memory-utilization": "lots"}))


def test_overrides_and_diff() -> None:
    ov = parse_overrides(["gpu-memory-utilization=0.9", "enforce-eager"])
    assert ov == {"gpu-memory-utilization": 0.9, "enforce-eager": True}
    p = profile(model="m", **{"gpu-memory-utilization": 0.97})
    (change,) = flag_diff(p, {"model": "m", "gpu_memory_utilization": 0.95})
    assert (change.flag, change.from_value, change.to_value) == ("--gpu-memory-utilization", 0.97, 0.95)


def test_detection_scores() -> None:
    vllm = b"(APIServer pid=1) INFO 12-01 03:04:05 [utils.py:233] non-default args: {}\n"
    sgl = b"[2026-02-24 11:55:44 TP0] Load weight begin. avail mem=94.60 GB\n"
    assert detect_backend(vllm) == "vllm"
    assert detect_backend(sgl) == "sglang"
    assert get_backend("vllm").launch.readiness_path("0.33.0") == "/health"
    assert get_backend("vllm").metrics.prefix() == "vllm:"


# ---- the memory arithmetic ---------------------------------------------------------------------

utils = st.floats(min_value=0.5, max_value=0.99).map(lambda x: round(x, 2))
totals = st.floats(min_value=20.0, max_value=190.0)
gibs = st.floats(min_value=0.05, max_value=10.0)


@given(utils, totals, gibs, st.floats(min_value=5.0, max_value=60.0), st.integers(min_value=10_000, max_value=2_000_000))
def test_lowering_frees_delta_u_times_total(u: float, total: float, need: float, kv: float, tokens: int) -> None:
    move = lower_util_for(u, total, need, headroom=1.0, kv=kv, tokens=tokens)
    assert move.util_new < u  # never the current value, always the right way
    assert move.moved_gb == pytest.approx((u - move.util_new) * total)
    if move.util_new > 0.01:
        assert move.moved_gb >= need - 1e-6  # rounded DOWN: at least the GiB asked for
        assert move.headroom_after is not None and move.headroom_after >= 1.0 + need - 1e-6
    assert move.kv_after == pytest.approx(kv - move.moved_gb)
    assert move.tokens_after is not None and move.tokens_after <= tokens
    if move.kv_bytes_after is not None:
        assert move.kv_bytes_after == int(move.kv_after * GIB)


@given(utils, totals, gibs)
def test_raising_gives_the_cache_delta_u_times_total(u: float, total: float, need: float) -> None:
    move = raise_util_for(u, total, need)
    assert move.util_new > u  # util ≤ 0.99 here: there is always room up to 1
    if move.util_new < 1.0:
        assert -move.moved_gb >= need - 1e-6


def _state(util: float, total: float, free_after: float, kv: float, tokens: int) -> RunState:
    s = RunState(backend="vllm", format="vllm-0.33.0")
    s.server_args = {"gpu_memory_utilization": util}
    for r in ("TP0", "TP1"):
        rm = s.rank(r)
        rm.total_gb, rm.kv_gb, rm.kv_tokens, rm.avail_after_capture_gb = total, kv, tokens, free_after
    s.max_total_num_tokens = tokens
    return s


@settings(max_examples=60, deadline=None)
@given(utils, totals, st.floats(min_value=0.1, max_value=4.9), st.floats(min_value=5.0, max_value=60.0),
       st.integers(min_value=10_000, max_value=2_000_000))
def test_oom_advice_invariants(u: float, total: float, free_after: float, kv: float, tokens: int) -> None:
    s = _state(u, total, free_after, kv, tokens)
    s.crash = Crash("cuda_oom", "prefill", "TP1", 10, "CUDA out of memory.")
    (f,) = [f for f in diagnose(s) if f.id == "oom_crash"]
    (c,) = f.changes
    assert c.flag == "--gpu-memory-utilization" and c.from_value == u and c.to_value < u
    assert "Lower --gpu-memory-utilization" in f.message
    assert f.predicted["freed_gb_per_gpu"] == pytest.approx((u - c.to_value) * total, abs=0.01)
    if c.to_value > 0.01:
        assert f.predicted["headroom_gb"] >= 5.0 - 0.01
    assert f.arithmetic and "Δu" in f.arithmetic


@settings(max_examples=40, deadline=None)
@given(utils, totals, st.floats(min_value=-5.0, max_value=-0.01))
def test_no_cache_blocks_advice_raises(u: float, total: float, kv: float) -> None:
    s = _state(u, total, 3.0, kv, 0)
    s.max_total_num_tokens = None
    s.crash = Crash("init_not_enough_memory", "startup", "TP0", 5,
                    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`")
    (f,) = [f for f in diagnose(s) if f.id == "init_not_enough_memory"]
    (c,) = f.changes
    assert c.to_value > c.from_value
    assert "RAISE" in f.message


def test_no_cache_blocks_at_util_one_proposes_no_util() -> None:
    s = _state(1.0, 79.19, 3.0, -1.0, 0)
    s.crash = Crash("init_not_enough_memory", "startup", "TP0", 5, "No available memory for the cache blocks.")
    (f,) = [f for f in diagnose(s) if f.id == "init_not_enough_memory"]
    assert all(c.flag != "--gpu-memory-utilization" for c in f.changes)


def test_json_formatter_records() -> None:
    """0.32+ `--logging-config.formatter json`: one object per record; the worker's rank comes from
    the multiprocessing name."""
    import io
    import json as _json

    from cockpit.backends.vllm.logparse import read_log

    def rec(proc: str, level: str, msg: str) -> str:
        return _json.dumps({"asctime": "2026-11-29 08:12:29,123", "levelname": level, "name": "vllm.v1.worker",
                            "processName": proc, "process": 42102, "message": msg})

    text = "\n".join([
        rec("VllmWorker-1", "INFO", "Model loading took 30.59 GiB memory and 13.2 seconds"),
        rec("EngineCore", "INFO", "GPU KV cache size: 314,160 tokens, Maximum concurrency for 32,768 tokens per request: 9.59x"),
        rec("VllmWorker-1", "ERROR", "WorkerProc hit an exception.\nTraceback (most recent call last):\n"
            '  File "v1/worker/gpu_model_runner.py", line 1, in capture_model\ntorch.OutOfMemoryError: CUDA out of memory. '
            "Tried to allocate 1.50 GiB. GPU 1 has a total capacity of 79.19 GiB of which 1.21 GiB is free."),
    ]) + "\n"
    st = read_log(io.BytesIO(text.encode()))
    assert detect_backend(text.encode()) == "vllm"
    assert st.ranks["TP1"].weights_gb == 30.59 and st.max_total_num_tokens == 314160
    assert st.crash is not None and (st.crash.kind, st.crash.phase, st.crash.rank) == ("graph_capture_oom", "graph_capture", "TP1")


def test_a_busy_gpu_is_named() -> None:
    s = _state(0.92, 79.19, 7.6, 38.35, 314_160)
    s.ranks["TP0"].pre_load_avail_gb, s.ranks["TP1"].pre_load_avail_gb = 78.31, 76.9
    (f,) = [f for f in diagnose(s) if f.id == "rank_memory_imbalance"]
    assert f.ranks == ("TP1",) and f.predicted["gap_gb"] == 1.41 and "--kv-cache-memory-bytes" in f.message


def test_multi_node_argv() -> None:
    p = Profile.model_validate({"name": "v", "backend": "vllm", "version": "0.33.0",
                                "hosts": [{"ssh": "a"}, {"ssh": "b"}], "server": {"model": "m", "tp": 16}})
    node0, node1 = get_backend("vllm").launch.node_argvs(p, None, "10.0.0.1:29501")
    assert node0[-8:] == ["--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "29501"]
    assert "--headless" not in node0 and "--headless" in node1 and node1[node1.index("--node-rank") + 1] == "1"


def _two_nodes(server: dict[str, object], **host1: object) -> Profile:
    return Profile.model_validate({
        "name": "v", "backend": "vllm", "version": "0.33.0",
        "hosts": [{"ssh": "a", "address": "10.0.0.1"}, {"ssh": "b", "address": "10.0.0.2", **host1}],
        "server": {"model": "m", **server}})


def _opt(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_multi_node_dp_argv_splits_the_ranks_and_names_the_head() -> None:
    node0, node1 = get_backend("vllm").launch.node_argvs(_two_nodes({"dp": 16, "tp": 1}), None, "10.0.0.1:13345")
    # the head takes no start rank: vLLM would read one there as hybrid load balancing and refuse
    # the headless node ("Remote engine 1 must not use --headless in external or hybrid dp lb mode")
    assert "--data-parallel-start-rank" not in node0 and _opt(node1, "--data-parallel-start-rank") == "8"
    for argv in (node0, node1):
        assert _opt(argv, "--data-parallel-size-local") == "8"
        assert _opt(argv, "--data-parallel-address") == "10.0.0.1" and _opt(argv, "--data-parallel-rpc-port") == "13345"
        assert "--nnodes" not in argv and "--master-addr" not in argv  # DP's way, not TP's
    assert "--headless" in node1 and "--headless" not in node0
    # vLLM would parse every one of them as Cockpit means it
    from cockpit.backends.vllm.flags import parse_serve_args

    assert parse_serve_args(node1[2:], "0.33.0")["data_parallel_start_rank"] == 8


def test_multi_node_dp_that_does_not_split_evenly_is_refused_naming_the_flag() -> None:
    with pytest.raises(FlagError) as exc:
        get_backend("vllm").launch.node_argvs(_two_nodes({"dp": 3}), None, "10.0.0.1:13345")
    assert "3 DP ranks do not split evenly over 2 nodes" in str(exc.value)


def test_multi_node_rendezvous_the_profile_names_wins() -> None:
    launch = get_backend("vllm").launch
    p = _two_nodes({"tp": 16, "master-addr": "10.9.9.9", "master-port": 29600})
    assert launch.rendezvous_addr(p.server) == "10.9.9.9:29600"
    node0, _ = launch.node_argvs(p, None, launch.rendezvous_addr(p.server))
    assert _opt(node0, "--master-addr") == "10.9.9.9" and node0.count("--master-port") == 1
    dp = _two_nodes({"dp": 2, "data-parallel-address": "10.9.9.9", "data-parallel-rpc-port": 13000})
    assert launch.rendezvous_addr(dp.server) == "10.9.9.9:13000"


def test_a_node_address_reaches_vllm_as_its_host_ip_and_a_host_env_stays_its_own() -> None:
    p = _two_nodes({"tp": 16}, env={"NCCL_SOCKET_IFNAME": "eth1"})
    launch = get_backend("vllm").launch
    assert launch.node_env(p, 0) == {"VLLM_HOST_IP": "10.0.0.1"}
    assert launch.node_env(p, 1) == {"VLLM_HOST_IP": "10.0.0.2"}
    assert p.hosts[1].env == {"NCCL_SOCKET_IFNAME": "eth1"} and p.hosts[0].env == {}
    one = Profile.model_validate({"name": "v", "backend": "vllm", "server": {"model": "m"},
                                  "hosts": [{"ssh": "a", "address": "10.0.0.1"}]})
    assert launch.node_env(one, 0) == {}  # one node: vLLM's own choice stands


@pytest.mark.parametrize("bad", ["10.0.0.1; rm -rf /", "-oProxyCommand=x", "a b", ""])
def test_a_host_address_that_is_not_one_is_refused(bad: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        Profile.model_validate({"name": "v", "backend": "vllm", "hosts": [{"ssh": "a", "address": bad}]})


def test_escape_sequences_in_a_vllm_log_never_reach_the_state(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The one rule of core.sanitize holds inside vLLM's parser too (not only at the terminal): an
    OOM message carrying OSC 52 (clipboard), OSC 0 (title) and ESC c (reset) is read as an OOM, and
    none of them survives into the state that the journal and `--json` carry."""
    import json
    from pathlib import Path

    text = Path("tests/data/vllm-0.33.0-qwen32b-tp2-0.97-prefill-oom.log").read_text()
    hostile = "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\x1b]0;pwned\x07\x1bc"
    text = text.replace("CUDA out of memory.", "CUDA out of memory." + hostile)
    assert hostile in text
    log = tmp_path / "hostile.log"
    log.write_text(text)
    state = get_backend("vllm").logs.read(str(log))
    assert state.crash is not None and state.crash.kind == "cuda_oom"
    dumped = json.dumps(state.to_json())
    assert "\\u001b" not in dumped and "\\u0007" not in dumped and "pwned" not in dumped
