"""The simulator's pure parts: argv handling, presets and SGLang's sizing rules, HiCache outcomes,
the batch scheduler. No processes here; the process-level behaviour is in the other test files."""

from __future__ import annotations

import os

import pytest

from cockpit.sim.main import main
from cockpit.sim.presets import GPUS, MODELS
from cockpit.sim.sglang import hicache
from cockpit.sim.sglang.config import decode_capture_sizes, load_config, split_sim_args
from cockpit.sim.sglang.scheduler import Req, SchedParams, Scheduler
from cockpit.sim.traffic import LONG_DOC_EVERY_S, LONG_DOC_TOKENS, arrivals

KIMI = ["--model-path", "/models/Kimi-K2.5", "--tp", "8", "--trust-remote-code"]


def test_unknown_flag_is_refused_like_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*KIMI, "--foo", "1"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("usage: launch_server.py")
    assert "launch_server.py: error: unrecognized arguments: --foo" in err


def test_ambiguous_graph_flag_on_0523(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*KIMI, "--sim-version", "0.5.23", "--cuda-graph-max-bs", "16"]) == 2
    err = capsys.readouterr().err
    assert "error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill" in err


def test_pp_prefix_is_ambiguous_and_model_path_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*KIMI, "--pp", "2"]) == 2
    assert "ambiguous option: --pp" in capsys.readouterr().err
    assert main(["--tp", "8"]) == 2
    assert "required: --model-path" in capsys.readouterr().err


def test_bad_sim_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*KIMI, "--sim-gpu", "gtx-480"]) == 2
    assert "invalid choice: 'gtx-480'" in capsys.readouterr().err
    assert main([*KIMI, "--sim-speed", "fast"]) == 2
    assert "invalid float value" in capsys.readouterr().err
    assert main([*KIMI, "--sim-bogus", "1"]) == 2


def test_sim_args_are_split_out_in_both_spellings() -> None:
    opts, rest = split_sim_args(["--tp", "8", "--sim-speed=20", "--sim-traffic", "steady", "--port", "1"])
    assert opts.speed == 20 and opts.traffic == "steady"
    assert rest == ["--tp", "8", "--port", "1"]


def test_a_startup_speed_switches_to_the_serving_speed_once_for_every_process(capsys: pytest.CaptureFixture[str]) -> None:
    """--sim-startup-speed: the clock runs at that rate until the server is ready, then at --sim-speed;
    a forked rank reads the same switch (shared memory), the clock is continuous and never goes back."""
    import time

    from cockpit.sim.clock import Clock

    opts, _ = split_sim_args(["--sim-speed", "1", "--sim-startup-speed=40"])
    assert (opts.speed, opts.startup_speed) == (1.0, 40.0)
    assert split_sim_args([])[0].startup_speed is None
    assert main([*KIMI, "--sim-startup-speed", "0"]) == 2
    assert "argument --sim-startup-speed: must be > 0" in capsys.readouterr().err
    from cockpit.sim.vllm.config import load_vllm_config

    qwen = ["serve", "Qwen/Qwen3-0.6B", "--sim-speed", "2"]
    assert (load_vllm_config(qwen).startup_speed, load_vllm_config([*qwen, "--sim-startup-speed=50"]).startup_speed) == (2.0, 50.0)
    assert main(["--sim-backend", "vllm", *qwen, "--sim-startup-speed", "-1"]) == 2
    assert "argument --sim-startup-speed: must be > 0" in capsys.readouterr().err

    clock = Clock(1.0, startup_speed=40.0)
    assert clock.rate() == 40.0 and clock.real(4.0) == pytest.approx(0.1)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a rank: waits for the main process's switch, then reports its rate and "now"
        try:
            while clock.rate() != 1.0:
                time.sleep(0.005)
            os.write(write, f"{clock.rate()} {clock.now()}".encode())
        finally:
            os._exit(0)
    time.sleep(0.05)
    before = clock.now()
    assert before >= 0.05 * 40 * 0.9  # ~2 simulated seconds in 50 ms
    clock.serving()
    after = clock.now()
    assert before <= after < before + 0.5  # continuous across the switch
    rate, child_now = os.read(read, 100).decode().split()
    os.waitpid(pid, 0)
    os.close(read)
    os.close(write)
    assert float(rate) == 1.0 and after - 0.01 <= float(child_now) <= clock.now()
    assert clock.rate() == 1.0 and clock.real(4.0) == 4.0
    clock.serving()  # a second call changes nothing
    assert clock.now() >= after
    plain = Clock(2.0)
    plain.serving()
    assert plain.rate() == 2.0 and Clock(3.0, startup_speed=3.0).rate() == 3.0


def test_both_engines_refuse_bad_sim_options_alike(capsys: pytest.CaptureFixture[str]) -> None:
    """One --sim-* splitter (cockpit/sim/options.py) serves both simulators' command lines."""
    vllm = ["--sim-backend", "vllm", "serve", "Qwen/Qwen3-0.6B"]
    for argv, prog in ((KIMI, "launch_server.py"), (vllm, "vllm serve")):
        assert main([*argv, "--sim-bogus=1"]) == 2
        err = capsys.readouterr().err
        assert f"{prog}: error: unrecognized arguments: --sim-bogus (simulator options: --sim-gpu" in err
        assert main([*argv, "--sim-seed"]) == 2
        assert f"{prog}: error: argument --sim-seed: expected one argument" in capsys.readouterr().err


def test_both_engines_answer_help_and_refusals_in_argparse_shape(capsys: pytest.CaptureFixture[str]) -> None:
    """One help/refusal shape (cockpit/sim/options.py's run_main) for both simulators: -h prints the
    usage and a line about the simulator on stdout (exit 0); a refused flag prints the usage and one
    `PROG: error: …` line on stderr, nothing on stdout and no traceback (exit 2)."""
    vllm = ["--sim-backend", "vllm", "serve", "Qwen/Qwen3-0.6B"]
    for argv, prog, about in ((KIMI, "launch_server.py", "A simulated SGLang server (cockpit)."),
                              (vllm, "vllm serve", "A simulated vLLM server (cockpit).")):
        for help_flag in ("-h", "--help"):
            assert main([*argv, help_flag]) == 0
            out, err = capsys.readouterr()
            lines = out.splitlines()
            assert err == "" and len(lines) == 3 and lines[0].startswith(f"usage: {prog} [") and lines[1] == "", out
            assert lines[2].startswith(about) and "docs/SIMULATOR.md" in lines[2]
        assert main([*argv, "--no-such-flag"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.splitlines()[0].startswith(f"usage: {prog} [")
        assert err.splitlines()[1:] == [f"{prog}: error: unrecognized arguments: --no-such-flag"], err


def test_default_mfs_heuristic_both_versions() -> None:
    llama = ["--model-path", "meta-llama/Llama-3.1-70B-Instruct", "--tp", "8", "--sim-gpu", "h100"]
    assert load_config(llama).mfs == 0.818
    assert load_config([*llama, "--sim-version", "0.5.23"]).mfs == 0.812
    cfg = load_config([*KIMI])
    assert not cfg.mfs_given and cfg.mfs == round((97887 - 14848) / 97887, 3)
    assert cfg.chunked_prefill_size == 8192 and cfg.cuda_graph_max_bs == 512
    assert load_config([*KIMI, "--mem-fraction-static", "0.93"]).mfs == 0.93


def test_capture_sizes() -> None:
    assert len(decode_capture_sizes(512)) == 52
    assert decode_capture_sizes(16) == [1, 2, 4, 8, 12, 16]
    cfg = load_config([*KIMI, "--sim-version", "0.5.23"])
    assert len(cfg.prefill_graph_sizes) == 58 and max(cfg.prefill_graph_sizes) == 8192


@pytest.mark.parametrize("gpu", sorted(GPUS))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_preset_resolves(gpu: str, model: str) -> None:
    cfg = load_config(["--model-path", "/m", "--tp", "8", "--sim-gpu", gpu, "--sim-model", model])
    assert 0.5 < cfg.mfs < 0.95
    assert cfg.model.cell_bytes(cfg.attn_tp) > 0
    assert cfg.gpu.total_mib > 40000


def test_story_numbers_come_out_of_the_presets() -> None:
    """Kimi-K2.5 on RTX PRO 6000, TP8: P, W, the MLA cell and the headroom of the story."""
    gpu, model = GPUS["rtx-pro-6000"], MODELS["kimi-k2.5"]
    from cockpit.sim.presets import gpu_index_extra_gib

    p = [gpu.total_gib - gpu.context_gib - gpu.init_gib - gpu_index_extra_gib(i) for i in range(8)]
    assert min(p) == pytest.approx(94.6, abs=0.01) and p.index(min(p)) == 3
    assert model.weights_gib(8, 1) == pytest.approx(71.82)
    assert model.cell_bytes(8) == (512 + 64) * 61 * 2
    for mfs, after in ((0.93, 0.82), (0.88, 5.55)):
        before_capture = min(p) * (1 - mfs) - model.workspace_gib
        assert before_capture - model.graph_gib(512) == pytest.approx(after, abs=0.02)
    assert model.graph_gib(512) == pytest.approx(3.75)


def test_hicache_plans_0_5_9() -> None:
    fits = hicache.plan("0.5.9", 8, 48, 449)
    assert fits.fail_rank is None and fits.victim is None
    too_big_alone = hicache.plan("0.5.9", 8, 500, 449)
    assert too_big_alone.fail_rank == 0 and too_big_alone.fail_free_gb == pytest.approx(449 - 10.737, abs=0.01)
    oversubscribed = hicache.plan("0.5.9", 8, 300, 449)
    assert oversubscribed.fail_rank is None and oversubscribed.victim is not None and oversubscribed.oom_at > 0


def test_hicache_plan_0_5_23_fails_on_the_per_rank_share() -> None:
    plan = hicache.plan("0.5.23", 8, 300, 449)
    assert plan.fail_rank == 0 and plan.fail_free_gb == pytest.approx((449 - 10.737) / 8, abs=0.01)
    assert hicache.plan("0.5.23", 8, 48, 449).fail_rank is None


def _params(**kw: object) -> SchedParams:
    base = dict(version="0.5.9", pool_tokens=60000, chunked_prefill_size=8192, max_prefill_tokens=16384,
                max_running_requests=2048, decode_log_interval=40, cuda_graph_max_bs=512, decode_graph=True,
                prefill_graph_max_tokens=0, prefill_tok_per_s=9000.0, decode_step_s=0.016, decode_per_req_s=0.0001)
    base.update(kw)
    return SchedParams(**base)  # type: ignore[arg-type]


def test_scheduler_chunks_long_prompts_and_logs_both_formats() -> None:
    for version, tail in (("0.5.9", "cuda graph: False"), ("0.5.23", "input throughput (token/s): ")):
        lines: list[str] = []
        prefills: list[int] = []
        done: list[Req] = []
        s = Scheduler(_params(version=version), lines.append, prefills.append, done.append)
        s.add(Req("a", 0.0, 12000, 50))
        s.advance(30.0)
        assert prefills[:2] == [8192, 12000 - 8192]
        assert [r.rid for r in done] == ["a"] and done[0].output_tokens == 50
        assert any(line.startswith("Decode batch, #running-req: 1, ") for line in lines)
        assert tail in lines[0]
        if version == "0.5.23":
            assert "#pending-token: " in lines[0]


def test_scheduler_retracts_when_the_pool_fills() -> None:
    lines: list[str] = []
    s = Scheduler(_params(pool_tokens=3000), lines.append, lambda n: None, lambda r: None)
    for i in range(6):
        s.add(Req(str(i), 0.0, 300, 1500))
    s.advance(200.0)
    retract = [line for line in lines if line.startswith("KV cache pool is full. Retract requests.")]
    assert retract and "#retracted_reqs: " in retract[0] and "#new_token_ratio: " in retract[0]
    assert s.stats.num_retracted_requests_total >= 1


def test_steady_traffic_has_a_long_document_every_240s() -> None:
    gen = arrivals("steady", 0)
    docs = []
    for a in gen:
        if a.t > 2 * LONG_DOC_EVERY_S + 1:
            break
        if a.prompt_tokens >= LONG_DOC_TOKENS:
            docs.append(a.t)
    assert docs == [LONG_DOC_EVERY_S, 2 * LONG_DOC_EVERY_S]
    assert list(arrivals("none")) == []


def test_rank_prefixes() -> None:
    cfg = load_config([*KIMI, "--dp", "8", "--enable-dp-attention", "--ep", "8"])
    assert cfg.rank_prefix(3) == "DP3 TP3 EP3"
    cfg = load_config(["--model-path", "/m", "--tp", "4", "--pp-size", "2"])
    assert cfg.rank_prefix(5) == "PP1 TP1"
    assert load_config(["--model-path", "/m"]).rank_prefix(0) == ""
    two = load_config(["--model-path", "/m", "--tp", "16", "--nnodes", "2", "--node-rank", "1"])
    assert (two.local_ranks, two.first_rank, two.rank_prefix(two.first_rank)) == (8, 8, "TP8")
    assert load_config([*KIMI, "--base-gpu-id", "2", "--gpu-id-step", "2"]).gpu_index(3) == 8


def test_a_collective_sets_other_messages_aside_without_losing_them(tmp_path) -> None:
    """Regression: a request queued while TP0 waited in a collective made it spin forever."""
    from multiprocessing import Pipe

    from cockpit.sim.clock import Clock
    from cockpit.sim.sglang.rank import RankProcess

    cfg = load_config([*KIMI, "--sim-dir", str(tmp_path)])
    main_end, rank_end = Pipe(duplex=True)
    rank = RankProcess(cfg, 0, rank_end, Clock(100.0), os.getpid())
    rank.inbox.append(("req", "earlier", 5, 5, 0))
    main_end.send(("req", "during", 7, 7, 0))
    main_end.send(("allreduce_result", "reserve-2", 1.5, 9.0))
    assert rank.allreduce_min("reserve-2", 3.0) == (1.5, 9.0)
    assert main_end.recv() == ("allreduce", "reserve-2", 0, 3.0)
    assert [m[1] for m in rank.inbox] == ["earlier", "during"]
    assert rank.recv(0) == ("req", "earlier", 5, 5, 0)


def test_metrics_histograms_are_cumulative_and_parse() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from cockpit.sim.histogram import Histogram
    from cockpit.sim.sglang.metrics import render_metrics
    from cockpit.sim.sglang.scheduler import E2E_BUCKETS, TTFT_BUCKETS

    ttft = Histogram(TTFT_BUCKETS)
    for v in (0.05, 0.3, 0.3, 500.0):
        ttft.observe(v)
    cfg = load_config([*KIMI, "--enable-metrics"])
    text = render_metrics(cfg, {"ttft": ttft.to_json(), "e2e": Histogram(E2E_BUCKETS).to_json(), "token_usage": 0.4},
                          {"token_capacity": 58833}, 0.0)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.name, s.labels.get("le")): s.value for s in fams["sglang:time_to_first_token_seconds"].samples}
    assert samples[("sglang:time_to_first_token_seconds_bucket", "0.1")] == 1
    assert samples[("sglang:time_to_first_token_seconds_bucket", "0.4")] == 3
    assert samples[("sglang:time_to_first_token_seconds_bucket", "+Inf")] == 4
    assert samples[("sglang:time_to_first_token_seconds_count", None)] == 4
    assert fams["sglang:token_usage"].samples[0].value == 0.4
    assert fams["sglang:max_total_num_tokens"].samples[0].value == 58833


def test_plain_data_parallel_runs_every_replica() -> None:
    cfg = load_config(["--model-path", "/m", "--tp", "4", "--dp", "2"])
    assert (cfg.world_size, cfg.local_ranks) == (8, 8)
    assert [cfg.rank_prefix(r) for r in (0, 3, 4, 7)] == ["DP0 TP0", "DP0 TP3", "DP1 TP0", "DP1 TP3"]
    att = load_config(["--model-path", "/m", "--tp", "8", "--dp", "8", "--enable-dp-attention"])
    assert att.world_size == 8 and att.rank_prefix(5) == "DP5 TP5"


def test_log_record_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    from cockpit.sim.sglang.logfmt import fmt_size, server_args_line, timestamp

    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", timestamp())
    monkeypatch.setenv("SGLANG_LOG_MS", "1")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", timestamp())
    assert fmt_size(224 * 2**20) == "224.00 MiB" and fmt_size(95.59 * 2**30) == "95.59 GiB"
    old = server_args_line(load_config([*KIMI, "--mem-fraction-static", "0.93"]))
    assert old.startswith("server_args=ServerArgs(model_path='/models/Kimi-K2.5', ") and "mem_fraction_static=0.93," in old
    new = server_args_line(load_config([*KIMI, "--sim-version", "0.5.23"]))
    assert new.startswith("server_args={'model_path': '/models/Kimi-K2.5', ") and "'cuda_graph_max_bs_decode': 512" in new


def test_nodes_of_one_job_never_share_a_gpu(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Two "nodes" of one multi-node run on one machine (the tests' loopback hosts) each see their GPU
    as their own: the other node's memory is on another machine in reality. A foreign process, or a
    process of another job, still counts."""
    import os

    from cockpit.sim import gpus

    job = "127.0.0.1:29500"
    n0 = gpus.ProcFile(tmp_path, 3, pid=os.getpid(), job=job, node=0)
    n0.set(30.0)
    n1 = gpus.ProcFile(tmp_path, 3, pid=os.getppid(), job=job, node=1)
    n1.set(8.0)
    total = 80.0 * 1024
    assert gpus.free_gib(tmp_path, 3, total, job, 1) == pytest.approx(80.0 - 8.0)
    assert gpus.free_gib(tmp_path, 3, total, job, 0) == pytest.approx(80.0 - 30.0)
    assert gpus.free_gib(tmp_path, 3, total, "10.0.0.1:29500", 0) == pytest.approx(80.0 - 38.0)
    assert gpus.free_gib(tmp_path, 3, total) == pytest.approx(80.0 - 38.0)  # nvidia-smi's view: both
