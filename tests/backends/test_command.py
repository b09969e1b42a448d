"""The command builder: profile -> argv list, validated through the flag table."""

from __future__ import annotations

from typing import Any

import pytest

from cockpit.backends.base import FlagError
from cockpit.backends.sglang.command import (
    build_argv,
    build_node_argv,
    effective_flags,
    flag_diff,
    parse_overrides,
)
from cockpit.backends.sglang.flags import parse_server_args
from cockpit.core.findings import FlagChange
from cockpit.core.profile import Profile, parse_profile


def prof(server: dict[str, Any], **extra: Any) -> Profile:
    return parse_profile({"name": "t", "python": "/opt/py/bin/python", "server": server, **extra}, "t.yaml")


def test_argv_shape_and_canonical_spelling() -> None:
    p = prof({"model-path": "/models/Kimi K2.5", "tp": 8, "mem-fraction-static": 0.93,
              "enable-hierarchical-cache": True, "hicache-size": 48, "enable-metrics": False,
              "cuda-graph-bs": [1, 2, 4]})
    argv = build_argv(p, version="0.5.9")
    assert argv == ["/opt/py/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/Kimi K2.5",
                    "--tp-size", "8", "--mem-fraction-static", "0.93", "--enable-hierarchical-cache",
                    "--hicache-size", "48", "--cuda-graph-bs", "1", "2", "4"]
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    # what we build, SGLang's own parser takes back unchanged
    assert parse_server_args(argv[3:], "0.5.9")["tp_size"] == 8


def test_program_replaces_python_module() -> None:
    p = prof({"model-path": "m", "port": 8001}, program=["cockpit", "sim", "--sim-gpu", "rtx-pro-6000"])
    assert build_argv(p) == ["cockpit", "sim", "--sim-gpu", "rtx-pro-6000", "--model-path", "m", "--port", "8001"]


def test_overrides_replace_in_place_and_append() -> None:
    p = prof({"model-path": "m", "tp": 8, "mem-fraction-static": 0.93})
    argv = build_argv(p, parse_overrides(["--mem-fraction-static=0.88", "tp-size=4", "enable-metrics"]))
    assert argv[3:] == ["--model-path", "m", "--tp-size", "4", "--mem-fraction-static", "0.88", "--enable-metrics"]


def test_profile_version_is_used() -> None:
    p = prof({"model-path": "m", "cuda-graph-max-bs": 64}, version="0.5.23")
    with pytest.raises(FlagError) as e:
        build_argv(p)
    assert "t.yaml: server.cuda-graph-max-bs: ambiguous option" in str(e.value)
    assert build_argv(p, version="0.5.9")[-2:] == ["--cuda-graph-max-bs", "64"]


@pytest.mark.parametrize(
    ("server", "needle"),
    [
        ({"foo": 1}, "t.yaml: server.foo: unrecognized arguments: --foo"),
        ({"tp": "x"}, "t.yaml: server.tp: argument --tp-size: invalid int value: 'x'"),
        ({"tp": 8.5}, "t.yaml: server.tp: argument --tp-size: invalid int value: '8.5'"),
        ({"pp": 2}, "t.yaml: server.pp: ambiguous option: --pp could match"),
        ({"enable-metrics": "yes"}, "t.yaml: server.enable-metrics: --enable-metrics is an on/off flag"),
        ({"kv-cache-dtype": "fp9"}, "t.yaml: server.kv-cache-dtype: argument --kv-cache-dtype: invalid choice"),
        ({"port": True}, "t.yaml: server.port: --port takes an integer"),
        ({"host": ["a", "b"]}, "t.yaml: server.host: --host takes one value"),
    ],
)
def test_bad_flags_name_the_profile_key(server: dict[str, Any], needle: str) -> None:
    with pytest.raises(FlagError) as e:
        build_argv(prof(server), version="0.5.9")
    assert needle in str(e.value)


def test_bad_override_names_the_set_item() -> None:
    with pytest.raises(FlagError, match=r"--set mem-fraction-static: argument --mem-fraction-static: invalid float"):
        build_argv(prof({"model-path": "m"}), parse_overrides(["mem-fraction-static=lots"]))


def test_values_that_look_like_flags_are_refused() -> None:
    with pytest.raises(FlagError):
        parse_overrides(["served-model-name=--evil"])
    assert parse_overrides(["chunked-prefill-size=-1"]) == {"chunked-prefill-size": -1}


def test_parse_overrides_types() -> None:
    got = parse_overrides(["mem-fraction-static=0.88", "--tp=8", "enable-metrics=false", "--skip-server-warmup",
                           "served-model-name=kimi", "cuda-graph-bs=1,2,4"])
    assert got == {"mem-fraction-static": 0.88, "tp": 8, "enable-metrics": False, "skip-server-warmup": True,
                   "served-model-name": "kimi", "cuda-graph-bs": [1, 2, 4]}
    for bad in ("=3", "not a flag=1", "-=1"):
        with pytest.raises(FlagError):
            parse_overrides([bad])


def test_node_argv_fills_multi_node_flags() -> None:
    p = prof({"model-path": "m", "tp": 16, "dist-init-addr": "10.0.0.10:50000"},
             hosts=[{"ssh": "gpu-node-0"}, {"ssh": "gpu-node-1"}])
    a0 = build_node_argv(p, 0)
    a1 = build_node_argv(p, 1, "10.0.0.11:6000")
    assert a0[-6:] == ["--dist-init-addr", "10.0.0.10:50000", "--nnodes", "2", "--node-rank", "0"]
    assert a1[a1.index("--dist-init-addr") + 1] == "10.0.0.11:6000"
    assert a1[a1.index("--node-rank") + 1] == "1"
    with pytest.raises(FlagError, match="outside"):
        build_node_argv(p, 2)
    no_addr = prof({"model-path": "m", "tp": 16}, hosts=[{"ssh": "a"}, {"ssh": "b"}])
    with pytest.raises(FlagError, match="needs dist-init-addr"):
        build_node_argv(no_addr, 0)


def test_flag_diff() -> None:
    p = prof({"model-path": "m", "tp": 8, "mem-fraction-static": 0.93, "enable-metrics": False})
    launched = {"model-path": "m", "tp-size": 8, "mem_fraction_static": 0.88, "enable-metrics": True,
                "chunked-prefill-size": 4096}
    assert flag_diff(p, launched) == [
        FlagChange("--mem-fraction-static", 0.93, 0.88),
        FlagChange("--enable-metrics", False, True),
        FlagChange("--chunked-prefill-size", None, 4096),
    ]
    assert flag_diff(p, dict(p.server)) == []
    assert FlagChange("--mem-fraction-static", 0.93, 0.88).as_diff() == "--mem-fraction-static 0.93 → 0.88"


def test_effective_flags_are_typed() -> None:
    flags = effective_flags(prof({"tp": 8, "mem-fraction-static": 0.9}), {"port": 9000})
    assert {d: v for d, (_s, v) in flags.items()} == {"tp_size": 8, "mem_fraction_static": 0.9, "port": 9000}


def test_backend_entry_point() -> None:
    from cockpit.backends import get_backend

    b = get_backend("sglang")
    assert b.name == "sglang" and b.versions() == ("0.5.9", "0.5.23")
    p = prof({"model-path": "m", "tp": 2})
    assert b.launch.argv(p)[-2:] == ["--tp-size", "2"]
    assert b.logs.new_state().phase == "unknown"
    with pytest.raises(ValueError, match="unknown backend"):
        get_backend("tgi")  # vllm is the second backend (tests/backends/test_vllm_backend.py)
