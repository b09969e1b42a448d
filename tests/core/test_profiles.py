"""The example profiles load, validate every flag, and say what the story says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cockpit.backends.base import HostFacts
from cockpit.backends.sglang.command import build_argv, build_node_argv
from cockpit.backends.sglang.flags import parse_server_args, resolve_version
from cockpit.backends.sglang.preflight import preflight
from cockpit.core.profile import load_profile

PROFILES = Path(__file__).resolve().parents[2] / "profiles"
ALL = sorted(PROFILES.glob("*.yaml"))
MINE = ["kimi-k2.5-tp8", "kimi-k2.5-tp8-hicache300", "llama-3.1-70b-h100-tp8", "two-node-tp16"]


def test_mine_are_present() -> None:
    assert {p.stem for p in ALL} >= set(MINE)


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_every_profile_loads_and_builds(path: Path) -> None:
    prof = load_profile(path)
    assert prof.name == path.stem
    if prof.backend != "sglang":  # vLLM profiles: tests/backends/test_vllm_backend.py
        from cockpit.backends import get_backend

        assert get_backend(prof.backend).launch.argv(prof)
        return
    argv = build_argv(prof)
    launcher = len(prof.program) if prof.program else 3
    if not prof.program:
        # the flags we emit are exactly what that SGLang version's parser accepts
        parse_server_args(argv[launcher:], resolve_version(prof.version))
    for i in range(len(prof.hosts)):
        if len(prof.hosts) > 1:
            # a Slurm job's head node comes from the allocation (the batch script fills it in)
            build_node_argv(prof, i, "head:1" if prof.target is not None else None)


def test_kimi_story_values() -> None:
    p = load_profile(PROFILES / "kimi-k2.5-tp8.yaml")
    assert p.flag("tp") == 8 and p.flag("mem-fraction-static") == 0.93 and p.flag("hicache-size") == 48
    assert p.policy.target_headroom_gb == 5.0 and p.policy.host_reserve_gb == 40
    host = HostFacts(host="gpu-box-1", mem_available_gb=449.0, gpu_count=8, gpu_mem_total_gib=95.0)
    assert [f.id for f in preflight(p, [host])] == ["hicache_fits"]
    wrong = load_profile(PROFILES / "kimi-k2.5-tp8-hicache300.yaml")
    assert wrong.flag("hicache-size") == 300
    assert preflight(wrong, [host])[0].id == "hicache_host_memory"


def test_two_node_profile() -> None:
    p = load_profile(PROFILES / "two-node-tp16.yaml")
    assert len(p.hosts) == 2 and p.flag("tp") == 16
    argv1 = build_node_argv(p, 1)
    assert argv1[argv1.index("--node-rank") + 1] == "1" and argv1[argv1.index("--nnodes") + 1] == "2"
    facts = [HostFacts(host=h.label, gpu_count=8) for h in p.hosts]
    assert preflight(p, facts) == []


def test_llama_profile_leaves_mfs_to_sglang() -> None:
    p = load_profile(PROFILES / "llama-3.1-70b-h100-tp8.yaml")
    assert p.flag("mem-fraction-static") is None
    f = preflight(p, [HostFacts(host="local", gpu_count=8, gpu_mem_total_gib=81559 / 1024)])[0]
    assert f.id == "default_mem_fraction" and f.predicted["mem_fraction_static"] == 0.812


@pytest.mark.parametrize("version", ["0.5.9", "0.5.8.post1", "0.10.1.1", "0.11.0rc2"])
def test_a_release_as_the_engines_name_it_is_a_version(tmp_path: Path, version: str) -> None:
    """SGLang publishes 0.5.8.post1, vLLM 0.10.1.1 and 0.11.0rc2: a profile pins them as printed."""
    p = tmp_path / "p.yaml"
    p.write_text(f"name: p\nhosts: [{{ssh: local}}]\nversion: '{version}'\nserver: {{model-path: /m, tp: 1}}\n")
    assert load_profile(p).version == version


@pytest.mark.parametrize("version", ["0.5", "latest", "0.5.9; rm -rf /", "v0.5.9", "0.5.9.post"])
def test_anything_else_is_refused_with_the_shape(tmp_path: Path, version: str) -> None:
    from cockpit.core.profile import ProfileError

    p = tmp_path / "p.yaml"
    p.write_text(f"name: p\nhosts: [{{ssh: local}}]\nversion: '{version}'\nserver: {{model-path: /m, tp: 1}}\n")
    with pytest.raises(ProfileError, match=r"version: a version looks like 0\.5\.9, 0\.5\.8\.post1"):
        load_profile(p)


def test_a_json_flag_may_be_written_as_a_yaml_mapping(tmp_path: Path) -> None:
    """vLLM's --speculative-config takes JSON text; a profile writes it as YAML (found launching a
    draft model: the mapping was refused as "Input should be a valid string")."""
    from cockpit.backends import get_backend

    p = tmp_path / "p.yaml"
    p.write_text("name: p\nbackend: vllm\nhosts: [{ssh: local}]\nversion: 0.32.0\n"
                 "server:\n  model: /m\n  speculative-config: {method: ngram, num_speculative_tokens: 2}\n")
    prof = load_profile(p)
    assert prof.server["speculative-config"] == '{"method":"ngram","num_speculative_tokens":2}'
    argv = list(get_backend("vllm").launch.argv(prof))
    at = argv.index("--speculative-config")
    assert json.loads(argv[at + 1]) == {"method": "ngram", "num_speculative_tokens": 2}
