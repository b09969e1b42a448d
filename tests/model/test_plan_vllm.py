"""vLLM's memory plan (cockpit/backends/vllm/plan.py): the budget against the golden vLLM logs (model,
GPU and setting known), the KV bytes per token against real vLLM logs of models with published
configs, the start-up refusals, the pinned `--kv-cache-memory-bytes`, calibration from a real
journal, and `cockpit plan` / `cockpit check` on vLLM profiles as real subprocesses."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.backends import get_backend
from cockpit.backends.vllm.plan import FLAG, PIN_FLAG, TABLE, cell_bytes, kv_tokens, plan, settings_from_flags
from cockpit.model.config import ModelConfig, parse_config
from cockpit.model.plan import Calibration, GpuFacts
from cockpit.model.weights import GIB, Tensor, WeightIndex, index_from_headers
from tests.data.models import synth

DATA = Path(__file__).resolve().parents[1] / "data"
REAL = DATA / "real" / "vllm"
ROOT = Path(__file__).resolve().parents[2]
H100 = 79.19  # what vLLM prints as an H100-80GB's total (the golden logs' summary line)
G092 = DATA / "vllm-0.33.0-qwen32b-tp2-0.92-healthy.log"
G097 = DATA / "vllm-0.33.0-qwen32b-tp2-0.97-prefill-oom.log"
QWEN32_FLAGS = {"tensor_parallel_size": 2, "max_model_len": 32768}


def facts(name: str) -> tuple[ModelConfig, WeightIndex]:
    raw = synth.load_config(name)
    return parse_config(raw, name, name=name), index_from_headers([Tensor(t[0], synth.nbytes(t)) for t in synth.tensors_for(raw)], 1)


def qwen32(util: float | None, version: str = "0.33.0", **extra: object):
    cfg, idx = facts("qwen3-32b")
    flags = {**QWEN32_FLAGS, **extra}
    if util is not None:
        flags["gpu_memory_utilization"] = util
    return plan(cfg, idx, GpuFacts(H100), settings_from_flags(flags, version))


# ---- the golden logs: Qwen3-32B, TP2, H100, 0.33.0 ------------------------------------------------


@pytest.mark.parametrize("log,util", [(G092, 0.92), (G097, 0.97)])
def test_golden_tokens_and_headroom(log: Path, util: float) -> None:
    """Nothing from the log but the flags: tokens within 3 % (the issue's bar), free memory after start-up
    within 0.5 GiB. The goldens were written with 0.87 GiB of non-torch memory at TP2; the plan now takes
    what real logs show (0.16 GiB on one GPU, ~0.26 at TP2: tests/data/real/plan/vllm/), 0.6 GiB less,
    which lands in the KV pool (+2 % here) and leaves the free memory after start-up as it was."""
    st = get_backend("vllm").logs.read(log)
    mp = qwen32(util)
    cur = mp.current
    assert cur is not None and cur.flag == FLAG and cur.value == util and not mp.current_is_default
    assert st.max_total_num_tokens is not None and st.min_headroom_gb is not None
    assert cur.max_total_num_tokens == pytest.approx(st.max_total_num_tokens, rel=0.03)
    assert cur.headroom_after_capture_gib == pytest.approx(st.min_headroom_gb, abs=0.5)
    assert cur.kv_gib == pytest.approx(st.ranks["TP0"].kv_gb, abs=1.0)
    assert mp.weights_gib_per_rank == pytest.approx(st.ranks["TP0"].weights_gb, abs=0.1)
    assert mp.backend == "vllm" and mp.tp == 2 and mp.kv_bytes_per_token == 131072  # 64 layers × 4 heads × 256 × 2 B


def test_rows_and_the_demo_story() -> None:
    """0.80–0.98; 0.97 leaves less than the 5 GiB target (the demo dies in prefill), and the
    recommendation is where the advice after the crash lands (0.94–0.95)."""
    mp = qwen32(0.97)
    assert [r.value for r in mp.rows] == list(TABLE) == [round(0.80 + 0.01 * i, 2) for i in range(19)]
    assert mp.severity in ("warning", "critical")
    assert mp.recommended is not None and 0.94 <= mp.recommended.value <= 0.95
    assert mp.recommended.headroom_after_capture_gib >= 5.0
    text = mp.summary()
    assert text.startswith("0.97 predicted to leave ") and f"{mp.recommended.value:g} predicted" in text


def test_the_arithmetic_of_one_row() -> None:
    """KV = ⌈u·T⌉ − W − N − A − Ĝ; whole 16-token blocks; free after start-up = F₀ − W − N − KV − G."""
    mp = qwen32(0.92)
    t = mp.terms
    w = mp.weights_gib_per_rank
    row = mp.current
    assert row is not None
    kv = math.ceil(0.92 * H100 * GIB) / GIB - w - t["non_torch_gib"] - t["activation_peak_gib"] - t["graph_estimate_gib"]
    assert row.kv_gib == pytest.approx(kv)
    assert row.max_total_num_tokens == int(kv * GIB // (131072 * 16)) * 16
    assert row.headroom_after_capture_gib == pytest.approx(t["pre_load_avail_gib"] - w - t["non_torch_gib"] - kv - t["graph_gib"])
    # Δu moves Δu·T between the KV cache and free memory, one for one (not δ·P as SGLang's mfs)
    r90, r95 = (next(r for r in mp.rows if r.value == v) for v in (0.90, 0.95))
    assert r95.kv_gib - r90.kv_gib == pytest.approx(0.05 * H100, abs=1e-6)
    assert r90.headroom_after_capture_gib - r95.headroom_after_capture_gib == pytest.approx(0.05 * H100, abs=1e-6)
    assert "KV = ⌈u·T⌉" in mp.arithmetic


def test_graph_estimate_outside_the_budget_before_020() -> None:
    """≤ 0.19 (or the env var at 0) the graphs come out of the (1 − util) share: the same util leaves
    more KV and less free memory, by the graph pool. Compared on one version (the env var), since
    0.19 also moved the non-torch term (terms.non_torch_term)."""
    new, old = qwen32(0.9, "0.33.0"), qwen32(0.9, "0.16.0")
    assert new.current is not None and old.current is not None
    g = new.terms["graph_gib"]
    assert any("outside the budget" in n for n in old.notes)
    eager = qwen32(0.9, enforce_eager=True)
    assert eager.terms["graph_gib"] == 0 and any("no CUDA graphs" in n for n in eager.notes)
    cfg, idx = facts("qwen3-32b")
    off = plan(cfg, idx, GpuFacts(H100), settings_from_flags({**QWEN32_FLAGS, "gpu_memory_utilization": 0.9}, "0.33.0",
                                                             {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}))
    assert off.current is not None
    assert off.current.kv_gib - new.current.kv_gib == pytest.approx(g)
    assert new.current.headroom_after_capture_gib - off.current.headroom_after_capture_gib == pytest.approx(g)
    assert any("outside the budget" in n for n in off.notes)


def test_default_util_is_vllms_and_said_so() -> None:
    for version, util in (("0.33.0", 0.92), ("0.16.0", 0.9)):
        mp = qwen32(None, version)
        assert mp.current_is_default and mp.current is not None and mp.current.value == util
        assert any(f"unset: vLLM {version} uses {util:g}" in n for n in mp.notes)


def test_free_memory_below_the_requested_share_does_not_start() -> None:
    """The golden refusal: 40.12 of 79.19 GiB free on cuda:1 at 0.92 (`… less than desired …`)."""
    st = get_backend("vllm").logs.read(DATA / "vllm-0.33.0-qwen32b-tp2-free-memory-below-util.log")
    assert st.crash is not None and st.crash.kind == "init_not_enough_memory"
    cfg, idx = facts("qwen3-32b")
    mp = plan(cfg, idx, GpuFacts(H100, free_gib=40.12 + 0.9), settings_from_flags({**QWEN32_FLAGS, "gpu_memory_utilization": 0.92}, "0.33.0"))
    assert mp.current is not None and not mp.current.starts and mp.severity == "critical"
    assert all(not r.starts for r in mp.rows)  # every row of the table asks more than 40 GiB
    assert mp.summary().startswith("0.92 asks more than the GPU's free memory at start-up: the server refuses to start "
                                   "(the most it allows is 0.50)")
    assert any("⌈u·T⌉ is more than the 40.12 GiB free at start-up" in n for n in mp.notes)


def test_kv_below_max_model_len_does_not_start() -> None:
    """The golden 0.16.0 refusal: 8.34 GiB of KV for Llama-3.1-8B holds 68,3xx tokens, less than
    --max-model-len 131072; the log's own estimate of the longest length is 68,304."""
    st = get_backend("vllm").logs.read(DATA / "vllm-0.16.0-llama8b-max-model-len.log")
    cfg, _idx = facts("llama-3.1-8b")
    s = settings_from_flags({"max_model_len": 131072, "gpu_memory_utilization": 0.5}, "0.16.0")
    c = cell_bytes(cfg, s)
    assert c == 131072  # 32 layers × 8 heads × 256 × 2 B
    assert kv_tokens(st.ranks["TP0"].kv_gb, c, 16) == pytest.approx(68304, abs=32)
    # on a 48 GB card (44.99 GiB) the plan puts the floor where 131,072 tokens fit
    _cfg, idx = facts("llama-3.1-8b")
    mp = plan(cfg, idx, GpuFacts(44.99), s)
    assert mp.current is not None and not mp.current.starts and mp.severity == "critical"
    floor = mp.terms["util_floor"]
    row = mp.current
    assert floor > 0.5 and any(f"below {FLAG} {floor:g} vLLM refuses to start" in n for n in mp.notes)
    assert row.value == 0.5 and "refuses to start (the floor is" in mp.summary()


def test_pinned_kv_cache_memory_bytes() -> None:
    """--kv-cache-memory-bytes K: KV = K whatever the util; the recommendation is a smaller pin."""
    k = int(42.32 * GIB)
    mp = qwen32(0.92, kv_cache_memory_bytes=k)
    cur = mp.current
    assert cur is not None and cur.flag == PIN_FLAG and cur.value == k
    assert cur.kv_gib == pytest.approx(42.32)
    assert cur.max_total_num_tokens == kv_tokens(42.32, 131072, 16)
    assert cur.label == f"{PIN_FLAG}={k} (42.32 GiB)"
    assert any("pins the KV cache" in n for n in mp.notes)
    rec = mp.recommended
    assert rec is not None and rec.flag == PIN_FLAG and rec.value < k and rec.headroom_after_capture_gib >= 5.0
    assert mp.summary().startswith(f"{PIN_FLAG}={k} (42.32 GiB) predicted to leave")


def test_calibrated_from_the_092_run_predicts_the_097_run() -> None:
    g92, g97 = (get_backend("vllm").logs.read(p) for p in (G092, G097))
    cal = Calibration("run-092", 0.92, g92.max_total_num_tokens, g92.min_headroom_gb)
    cfg, idx = facts("qwen3-32b")
    mp = plan(cfg, idx, GpuFacts(H100), settings_from_flags({**QWEN32_FLAGS, "gpu_memory_utilization": 0.97}, "0.33.0"), calibration=cal)
    assert mp.calibrated_from == "run-092"
    cur = mp.current
    assert cur is not None
    assert cur.headroom_after_capture_gib == pytest.approx(g97.min_headroom_gb, abs=0.35)
    assert cur.max_total_num_tokens == pytest.approx(g97.max_total_num_tokens, rel=0.01)
    assert next(r for r in mp.rows if r.value == 0.92).max_total_num_tokens == pytest.approx(g92.max_total_num_tokens, abs=16)
    assert set(mp.calibration_error) >= {"max_total_num_tokens_pct", "headroom_after_capture_gib"}


# ---- real vLLM logs: the KV bytes per token of published configs --------------------------------

# (excerpt, model folder, TP): each prints `Available KV cache memory` (local rank 0) and the KV
# cache's token capacity; the model is named by the source (see docs/PLAN.md).
REAL_KV = [
    ("vllm-project-vllm-20707.log", "llama-3.1-8b", 1),  # Llama-3.1-8B-Instruct, eager, --max-model-len 40000
    ("vllm-project-vllm-29335.log", "tinyllama-1.1b", 1),  # TinyLlama-1.1B (2.0513 GiB of weights), 2048 context
    ("vllm-project-vllm-19794.log", "qwen3-1.7b", 1),  # a small Qwen3 (40,960 context; 0.6B and 1.7B share the KV shape)
    ("QwenLM-Qwen3-VL-1684.log", "qwen3-235b-a22b", 8),  # Qwen3-VL-235B-A22B's text model, TP8 EP8
]


def _kv_line(text: str) -> float:
    m = re.search(r"Available KV cache memory: (-?[\d.]+) GiB", text)
    assert m is not None
    return float(m.group(1))


@pytest.mark.parametrize("log,model,tp", REAL_KV)
def test_real_logs_kv_memory_to_tokens(log: str, model: str, tp: int) -> None:
    """The log's own KV GiB through the plan's bytes per token and 16-token blocks gives the log's
    token count within 0.1 % (the GiB is printed rounded to 2 decimals)."""
    st = get_backend("vllm").logs.read(REAL / log)
    kv = _kv_line((REAL / log).read_text(encoding="utf-8"))
    cfg, _idx = facts(model)
    c = cell_bytes(cfg, settings_from_flags({"tensor_parallel_size": tp}, "0.33.0"))
    assert st.max_total_num_tokens is not None
    assert kv_tokens(kv, c, 16) == pytest.approx(st.max_total_num_tokens, rel=0.001)


def test_real_tinyllama_weights() -> None:
    """vllm#29335 loads TinyLlama-1.1B in 2.0513 GiB; the published checkpoint's bytes give 2.049."""
    st = get_backend("vllm").logs.read(REAL / "vllm-project-vllm-29335.log")
    cfg, idx = facts("tinyllama-1.1b")
    mp = plan(cfg, idx, GpuFacts(H100), settings_from_flags({"gpu_memory_utilization": 0.9}, "0.11.1"))
    assert mp.weights_gib_per_rank == pytest.approx(st.ranks["TP0"].weights_gb, abs=0.01)


# ---- the CLI -------------------------------------------------------------------------------------


def cockpit(*args: str, env_root: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update({"XDG_DATA_HOME": str(env_root / "xdg-data"), "XDG_CONFIG_HOME": str(env_root / "xdg-config"),
                "HOME": str(env_root), "PYTHONPATH": str(ROOT)})
    return subprocess.run([sys.executable, "-m", "cockpit", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=env_root)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vplan")
    model = root / "Qwen3-32B"
    synth.write_checkpoint(model, synth.load_config("qwen3-32b"), shards=4)
    text = (ROOT / "profiles" / "demo-vllm.yaml").read_text()
    assert "model: Qwen/Qwen3-32B" in text
    profile = root / "qwen32-vllm.yaml"
    profile.write_text(text.replace("model: Qwen/Qwen3-32B", f"model: {model}"))
    return {"root": root, "model": model, "profile": profile}


def test_model_config_form(qwen_dir: dict[str, Path], tmp_path: Path) -> None:
    res = cockpit("plan", "--model-config", str(qwen_dir["model"]), "--backend", "vllm", "--gpu-mem-gb", str(H100),
                  "--tp", "2", "--set", "gpu-memory-utilization=0.97", "--set", "max-model-len=32768", "--json", env_root=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    out = json.loads(res.stdout)
    assert out["backend"] == "vllm" and out["version"] == "0.33.0" and out["tp"] == 2
    assert [r["value"] for r in out["rows"]] == list(TABLE) and {r["flag"] for r in out["rows"]} == {FLAG}
    assert out["current"]["value"] == 0.97 and 0.94 <= out["recommended"]["value"] <= 0.95
    assert out["kv_bytes_per_token"] == 131072
    st = get_backend("vllm").logs.read(G097)
    assert out["current"]["max_total_num_tokens"] == pytest.approx(st.max_total_num_tokens, rel=0.03)


def test_profile_form_reads_serve_model(qwen_dir: dict[str, Path], tmp_path: Path) -> None:
    """A vLLM profile names its model as `server.model` (the `serve MODEL` positional)."""
    res = cockpit("plan", str(qwen_dir["profile"]), "--gpu-mem-gb", str(H100), env_root=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    text = res.stdout
    assert "memory plan · Qwen3-32B · vllm 0.33.0 · TP2" in text
    assert "activation peak" in text and "non-torch memory" in text and "req_to_token" not in text
    assert "← profile" in text and "← recommended" in text and "0.97 predicted to leave" in text
    lines = [ln for ln in text.splitlines() if re.match(r"^\s+0\.\d+\s+[\d,]+\s", ln)]
    assert len(lines) == 19
    pinned = cockpit("plan", str(qwen_dir["profile"]), "--gpu-mem-gb", str(H100), "--set", "kv-cache-memory-bytes=30G",
                     "--json", env_root=tmp_path)
    assert pinned.returncode == 0, pinned.stderr
    cur = json.loads(pinned.stdout)["current"]
    assert cur["flag"] == PIN_FLAG and cur["value"] == 30 * 2**30


def test_check_on_a_vllm_profile_has_the_plan(qwen_dir: dict[str, Path], tmp_path: Path) -> None:
    res = cockpit("check", str(qwen_dir["profile"]), "--gpu-mem-gb", str(H100), "--host-mem-gb", "500", "--gpus", "2",
                  "--json", env_root=tmp_path)
    findings = {f["id"]: f for f in json.loads(res.stdout)["findings"]}
    plan_f = findings["memory_plan"]
    assert plan_f["severity"] in ("warning", "critical")
    assert plan_f["message"].startswith("0.97 predicted to leave ")
    assert plan_f["changes"] and plan_f["changes"][0]["flag"] == FLAG and plan_f["changes"][0]["from"] == 0.97
    assert "KV = ⌈u·T⌉" in plan_f["arithmetic"]


@pytest.mark.parametrize("args,needle", [
    (["--tp", "2", "--dp", "2", "--ep", "3"], "spans TP × DP = 4"),
    (["--tp", "2", "--set", "mem-fraction-static=0.9"], "mem-fraction-static"),
    (["--tp", "2", "--set", "kv-cache-dtype=int3"], "kv-cache-dtype"),
])
def test_bad_input_exits_2(qwen_dir: dict[str, Path], tmp_path: Path, args: list[str], needle: str) -> None:
    res = cockpit("plan", "--model-config", str(qwen_dir["model"]), "--backend", "vllm", "--gpu-mem-gb", "80", *args,
                  env_root=tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert needle in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("value", ["max-model-len=4096\nrm -rf ~", "max-model-len=4096\rx", "--max-model-len=a\nb"])
def test_set_value_with_a_newline_is_refused_as_for_sglang(qwen_dir: dict[str, Path], tmp_path: Path, value: str) -> None:
    """A vLLM `--set` value may not hold a newline or CR, as a profile's may not: one line naming the
    key, exit 2, the same words as SGLang's refusal of its own flag."""
    res = cockpit("plan", str(qwen_dir["profile"]), "--gpu-mem-gb", str(H100), "--set", value, env_root=tmp_path)
    assert res.returncode == 2 and res.stdout == "", (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "max-model-len" in lines[0] and "a value must be a single line (no newline or NUL)" in lines[0]
    sgl = cockpit("plan", "--model-config", str(qwen_dir["model"]), "--gpu-mem-gb", str(H100), "--tp", "2",
                  "--set", value.replace("max-model-len", "context-length"), env_root=tmp_path)
    assert sgl.returncode == 2 and "a value must be a single line (no newline or NUL)" in sgl.stderr, sgl.stderr


def test_set_value_with_a_nul_is_refused() -> None:
    """NUL cannot reach the CLI through argv; the parser behind `--set` refuses it all the same."""
    from cockpit.backends.base import FlagError

    with pytest.raises(FlagError, match="single line"):
        get_backend("vllm").flags.parse_overrides(["served-model-name=a\x00b"])


def test_profile_without_a_model_is_named(tmp_path: Path) -> None:
    prof = tmp_path / "nomodel.yaml"
    prof.write_text("name: nomodel\nbackend: vllm\nhosts:\n  - ssh: local\nserver:\n  tensor-parallel-size: 1\n")
    res = cockpit("plan", str(prof), "--gpu-mem-gb", "80", env_root=tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "names no model for vllm" in res.stderr and "Traceback" not in res.stderr


def test_calibration_from_a_real_journal_run(qwen_dir: dict[str, Path], tmp_path: Path) -> None:
    """A finished 0.92 run of the same setup in the journal (the golden log, read by the product's
    own vLLM parser) calibrates the profile's 0.97: the 0.97 log's free memory within 0.35 GiB."""
    from cockpit.core.profile import load_profile
    from cockpit.journal import Journal
    from cockpit.supervisor.api import RunInfo

    prof = load_profile(qwen_dir["profile"])
    flags = {**prof.server, "gpu-memory-utilization": 0.92}
    j = Journal.open(tmp_path / "xdg-data" / "cockpit" / "journal.sqlite3")
    try:
        info = RunInfo(id="run-092", profile=prof.name, hosts=("local",), pid=1, pgid=1, started_at="2026-11-29T08:00:00+00:00",
                       run_dir="/tmp/r", log_path=str(G092), flags=dict(flags), version="0.33.0")
        j.record_start(info, prof.name, dict(flags))
        j.record_end("run-092", "stopped", get_backend("vllm").logs.read(G092), [])
    finally:
        j.close()
    res = cockpit("plan", str(qwen_dir["profile"]), "--gpu-mem-gb", str(H100), "--json", env_root=tmp_path)
    out = json.loads(res.stdout)
    assert out["calibrated_from"] == "run-092", res.stderr
    g97 = get_backend("vllm").logs.read(G097)
    assert out["current"]["value"] == 0.97
    assert out["current"]["headroom_after_capture_gib"] == pytest.approx(g97.min_headroom_gb, abs=0.35)
    assert out["current"]["max_total_num_tokens"] == pytest.approx(g97.max_total_num_tokens, rel=0.01)
    # another TP is another setup: not calibrated by this run
    other = cockpit("plan", str(qwen_dir["profile"]), "--gpu-mem-gb", str(H100), "--set", "tensor-parallel-size=4", "--json",
                    env_root=tmp_path)
    assert json.loads(other.stdout)["calibrated_from"] is None
