"""Preflight rules: per-rank HiCache arithmetic, GPU counts, parallel layout, mfs range."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cockpit.backends.base import FlagError, HostFacts
from cockpit.backends.sglang.preflight import preflight
from cockpit.core.findings import FlagChange, exit_code_for
from cockpit.core.profile import Profile, parse_profile
from cockpit.telemetry.hostfacts import cgroup_headroom_bytes, local_host_facts

HOST = HostFacts(host="gpu-box-1", mem_total_gb=500.0, mem_available_gb=449.0, gpu_count=8, gpu_mem_total_gib=95.0, source="override")


def prof(server: dict[str, Any], **extra: Any) -> Profile:
    base = {"name": "t", "hosts": [{"ssh": "gpu-box-1"}], "server": {"model-path": "/m", **server}}
    base.update(extra)
    return parse_profile(base, "t.yaml")


def ids(fs: list[Any]) -> list[str]:
    return [f.id for f in fs]


def test_story_hicache_300_is_refused_with_arithmetic() -> None:
    p = prof({"tp": 8, "mem-fraction-static": 0.85, "enable-hierarchical-cache": True, "hicache-size": 300})
    fs = preflight(p, [HOST])
    f = fs[0]
    assert f.id == "hicache_host_memory" and f.severity == "critical"
    assert "8 ranks × 300 GB = 2400 GB + 40 GB reserve" in f.message and "> 449 GB" in f.message
    assert f.changes == (FlagChange("--hicache-size", 300, 49),)
    assert 45 <= f.changes[0].to_value <= 51  # "near 48"
    assert "GB per rank" in f.message
    assert exit_code_for(fs) == 1


def test_story_hicache_48_fits() -> None:
    p = prof({"tp": 8, "mem-fraction-static": 0.88, "enable-hierarchical-cache": True, "hicache-size": 48})
    fs = preflight(p, [HOST])
    assert ids(fs) == ["hicache_fits"] and exit_code_for(fs) == 0


def test_hicache_reserve_from_policy() -> None:
    p = prof({"tp": 8, "enable-hierarchical-cache": True, "hicache-size": 48, "mem-fraction-static": 0.88},
             policy={"host-reserve-gb": 60})
    assert ids(preflight(p, [HOST])) == ["hicache_host_memory"]


def test_hicache_nothing_fits_turns_it_off() -> None:
    p = prof({"tp": 8, "enable-hierarchical-cache": True, "hicache-size": 10, "mem-fraction-static": 0.88})
    f = preflight(p, [HostFacts(host="gpu-box-1", mem_available_gb=45.0)])[0]
    assert f.changes == (FlagChange("--enable-hierarchical-cache", True, False),)


def test_hicache_by_ratio_is_info() -> None:
    p = prof({"tp": 8, "enable-hierarchical-cache": True, "mem-fraction-static": 0.88})
    assert ids(preflight(p, [HOST])) == ["hicache_ratio_unchecked"]


def test_gpu_count() -> None:
    p = prof({"tp": 8, "mem-fraction-static": 0.88})
    few = HostFacts(host="gpu-box-1", gpu_count=4)
    assert ids(preflight(p, [few])) == ["gpu_count"]
    many = HostFacts(host="gpu-box-1", gpu_count=16)
    assert ids(preflight(p, [many])) == ["gpus_idle"]


def test_two_nodes() -> None:
    hosts = [{"ssh": "gpu-node-0"}, {"ssh": "gpu-node-1"}]
    p = prof({"tp": 16, "mem-fraction-static": 0.85, "dist-init-addr": "10.0.0.1:5000"}, hosts=hosts)
    facts = [HostFacts(host="gpu-node-0", gpu_count=8), HostFacts(host="gpu-node-1", gpu_count=8)]
    assert preflight(p, facts) == []
    bad = prof({"tp": 12, "nnodes": 3, "mem-fraction-static": 0.85}, hosts=hosts)
    assert ids(preflight(bad, facts))[:1] == ["parallel_layout"]


def test_layout_divisibility() -> None:
    assert ids(preflight(prof({"tp": 8, "ep": 3, "mem-fraction-static": 0.8}), [])) == ["parallel_layout"]
    assert ids(preflight(prof({"tp": 8, "attn-dp-size": 3, "mem-fraction-static": 0.8}), [], version="0.5.23")) == ["parallel_layout"]


@pytest.mark.parametrize(("mfs", "severity"), [(1.0, "critical"), (0.97, "warning")])
def test_mfs_range(mfs: float, severity: str) -> None:
    f = preflight(prof({"mem-fraction-static": mfs}), [])[0]
    assert f.id == "mem_fraction_range" and f.severity == severity


@pytest.mark.parametrize("mfs", [1.2, 0.0, -0.5])
def test_mfs_outside_a_fraction_is_bad_input(mfs: float) -> None:
    """Outside (0, 1] it is no fraction: the flag table's bounds refuse it (issue 40, finding 11)."""
    with pytest.raises(FlagError, match=r"allowed above 0 and at most 1"):
        preflight(prof({"mem-fraction-static": mfs}), [])


def test_default_mfs_predicted_from_gpu_size() -> None:
    p = prof({"tp": 8}, version="0.5.9")
    f = preflight(p, [HostFacts(host="gpu-box-1", gpu_mem_total_gib=81559 / 1024)])[0]
    assert f.id == "default_mem_fraction" and f.predicted == {"mem_fraction_static": 0.818}
    f = preflight(p, [HostFacts(host="gpu-box-1", gpu_mem_total_gib=81559 / 1024)], version="0.5.23")[0]
    assert f.predicted == {"mem_fraction_static": 0.812}


def test_unmeasured_host_is_said() -> None:
    fs = preflight(prof({"mem-fraction-static": 0.88}), [HostFacts(host="gpu-box-1")])
    assert ids(fs) == ["host_facts_unknown"]


def test_bad_flag_raises_flag_error() -> None:
    with pytest.raises(FlagError, match=r"t\.yaml: server\.cuda-graph-max-bs: ambiguous option"):
        preflight(prof({"cuda-graph-max-bs": 8}), [HOST], version="0.5.23")


def test_local_host_facts_are_real() -> None:
    f = local_host_facts(use_nvml=False, env={"PATH": "/nonexistent"})
    assert f.host == "local"
    assert f.mem_total_gb is not None and f.mem_total_gb > 0
    assert f.mem_available_gb is not None and 0 < f.mem_available_gb <= f.mem_total_gb + 1e-6
    assert f.gpu_count is None and f.gpu_mem_total_gib is None  # unknown, never 0


def test_local_host_facts_read_nvidia_smi(fake_nvidia_smi: Any) -> None:
    f = local_host_facts(use_nvml=False, env={"PATH": fake_nvidia_smi.path_env})
    assert f.gpu_count == 2 and f.source == "nvidia-smi"
    assert f.gpu_mem_total_gib == pytest.approx(81559 / 1024, abs=0.01)
    assert f.gpu_free_gib[0] == pytest.approx((81559 - 40000) / 1024, abs=0.01)
    fake_nvidia_smi.use("fail")
    assert local_host_facts(use_nvml=False, env={"PATH": fake_nvidia_smi.path_env}).gpu_count is None


def test_cgroup_headroom(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text("8000000000\n")
    (tmp_path / "memory.current").write_text("3000000000\n")
    assert cgroup_headroom_bytes(tmp_path) == 5_000_000_000
    unlimited = tmp_path / "u"
    unlimited.mkdir()
    (unlimited / "memory.max").write_text("max\n")
    assert cgroup_headroom_bytes(unlimited) is None


def test_one_server_across_nodes_needs_one_engine_release_everywhere() -> None:
    from cockpit.preflight.launchcheck import _version_findings

    same = [("a", {"engine_version": "0.32.0+cpu"}), ("b", {"engine_version": "0.32.0+cpu"})]
    assert _version_findings("vllm", same) == []
    differ = _version_findings("vllm", [("a", {"engine_version": "0.32.0"}), ("b", {"engine_version": "0.33.0"})])
    assert [f.id for f in differ] == ["engine_version_differs"] and differ[0].severity == "critical"
    assert "a 0.32.0, b 0.33.0" in differ[0].message
    unread = _version_findings("vllm", [("a", {"engine_version": "0.32.0"}), ("b", {"engine_version": None})])
    assert [f.id for f in unread] == ["engine_version_unknown"] and "b" in unread[0].message
    # nothing read anywhere: nothing to compare, nothing claimed
    assert _version_findings("vllm", [("a", {}), ("b", {})]) == []


def test_engine_pythons_are_the_profile_python_and_the_one_beside_the_program() -> None:
    from cockpit.core.profile import Profile
    from cockpit.preflight.launchcheck import engine_pythons

    p = Profile.model_validate({"name": "v", "backend": "vllm", "python": "/opt/v/bin/python",
                                "program": ["/opt/v/bin/vllm", "serve"], "server": {"model": "m"}})
    assert engine_pythons(p) == ["/opt/v/bin/python"]
    other = p.model_copy(update={"python": "/usr/bin/python3"})
    assert engine_pythons(other) == ["/usr/bin/python3", "/opt/v/bin/python"]
    bare = Profile.model_validate({"name": "v", "backend": "vllm", "program": ["vllm", "serve"], "server": {"model": "m"}})
    assert engine_pythons(bare) == []
