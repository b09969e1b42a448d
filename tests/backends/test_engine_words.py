"""What the UI and the CLI say about an engine comes from its backend (issue 26, "words by engine"):
the tuned flags, the host cache, the crash labels, the predicted effects, a role's hint, the plan's
own terms and the /metrics switch. Real backends, real records; no stand-ins."""

from __future__ import annotations

from cockpit.backends import get_backend, host_cache_gb_per_rank, words_of
from cockpit.core.findings import predicted_phrases
from cockpit.core.state import ENGINE_WATCHDOG, HOST_CACHE_SHORT
from cockpit.journal import RunRecord
from cockpit.serving.servermetrics import server_summary
from cockpit.ui.screens.crash import crash_kind_words
from cockpit.ui.screens.tune import memory_setting, setting_words


def _run(backend: str | None, flags: dict[str, object]) -> RunRecord:
    return RunRecord(id="r1", profile="p", started_at="2026-12-01T00:00:00+00:00", outcome="stopped",
                     backend=backend, flags=dict(flags))


def test_the_tuning_screen_names_the_flags_the_runs_engine_tunes() -> None:
    vllm = _run("vllm", {"model": "m", "gpu-memory-utilization": 0.85, "max-num-seqs": 128})
    assert setting_words(vllm) == "--gpu-memory-utilization 0.85, --max-num-seqs 128"
    assert memory_setting(vllm) == ("gpu-memory-utilization", 0.85)
    sglang = _run("sglang", {"mem-fraction-static": 0.88, "cuda-graph-max-bs": 64, "max-num-seqs": 9})
    # a flag of the other engine is not this engine's setting
    assert setting_words(sglang) == "--mem-fraction-static 0.88, --cuda-graph-max-bs 64"
    assert memory_setting(sglang) == ("mem-fraction-static", 0.88)
    # a run the journal has not read as any engine's yet: any engine's tuned flags it set
    assert setting_words(_run(None, {"max-num-seqs": 9})) == "--max-num-seqs 9"
    assert setting_words(_run("sglang", {"tp": 8})) == "the engine's defaults"


def test_the_host_cache_is_the_backends_flags_and_label() -> None:
    on = {"enable-hierarchical-cache": True, "hicache-size": 48}
    assert host_cache_gb_per_rank("sglang", on) == 48.0
    assert host_cache_gb_per_rank("sglang", {"enable_hierarchical_cache": True, "hicache_size": 12}) == 12.0
    assert host_cache_gb_per_rank("sglang", {"hicache-size": 48}) is None  # not turned on
    assert host_cache_gb_per_rank("vllm", on) is None  # vLLM declares no host cache Cockpit reads
    assert host_cache_gb_per_rank(None, on) is None
    assert words_of("sglang").host_cache_label == "HiCache"
    assert words_of("vllm").host_cache_label is None
    assert words_of("no-such-engine").tuned_flags == ()


def test_crash_kinds_in_an_engines_words_are_labelled_by_it() -> None:
    assert crash_kind_words(HOST_CACHE_SHORT, "sglang") == "HiCache: not enough host memory"
    assert crash_kind_words(ENGINE_WATCHDOG, "sglang") == "scheduler watchdog timeout"
    assert crash_kind_words(HOST_CACHE_SHORT, "vllm") == "host cache: not enough host memory"
    assert crash_kind_words(ENGINE_WATCHDOG) == "the engine's watchdog fired"
    assert crash_kind_words("cuda_oom", "vllm") == "CUDA out of memory"


def test_an_engines_predicted_effects_are_worded_once_its_backend_loads() -> None:
    get_backend("vllm")
    get_backend("sglang")
    assert predicted_phrases({"max_model_len": 4096}) == ["context length 4,096 tokens"]
    assert predicted_phrases({"hicache_size": 24}) == ["--hicache-size 24 GB per rank"]
    assert predicted_phrases({"some_new_gb": 1.5}) == ["some new 1.5 GiB"]  # a key nobody words: never the raw key


def test_a_roles_hint_and_the_plans_own_terms_are_the_engines() -> None:
    assert get_backend("sglang").launch.role_hint("decode") == "disaggregation-mode: decode"
    assert get_backend("vllm").launch.role_hint("prefill") == "kv-transfer-config with kv_role kv_producer (or kv_both)"
    vllm_lines = get_backend("vllm").planner.term_lines(
        {"non_torch_gib": 0.5, "activation_peak_gib": 1.25, "graph_gib": 0.75, "max_num_batched_tokens": 8192,
         "max_num_seqs": 256})
    assert [line.split()[0] for line in vllm_lines] == ["non-torch", "activation", "CUDA"]
    assert "8,192 tokens, 256 seqs" in vllm_lines[1]
    sglang_lines = get_backend("sglang").planner.term_lines(
        {"graph_gib": 0.75, "cuda_graph_max_bs": 160, "req_to_token_gib": 0.2, "context_length": 131072})
    assert "max bs 160" in sglang_lines[0] and "context 131,072" in sglang_lines[1]
    assert get_backend("sglang").planner.term_lines({}) == []


def test_the_metrics_hint_names_the_engines_switch_or_nothing() -> None:
    said = server_summary(None, None, {}, [], 10.0, words_of("sglang").metrics_switch)
    assert said == {"available": False, "reason": "/metrics did not answer (start the server with --enable-metrics)"}
    # vLLM always serves /metrics: no switch to name
    assert server_summary(None, None, {}, [], 10.0, words_of("vllm").metrics_switch)["reason"] == "/metrics did not answer"
