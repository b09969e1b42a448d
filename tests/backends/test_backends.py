"""The backend port: every registered backend implements the whole `Backend` protocol, and the
layers above reach an engine only through `get_backend` (lint-imports checks the imports)."""

from __future__ import annotations

import inspect

import pytest

from cockpit.backends import backend_names, get_backend
from cockpit.backends.base import GROUPS, Backend
from cockpit.core.profile import parse_profile


def _methods(protocol: type) -> list[str]:
    return sorted(name for name, member in vars(protocol).items()
                  if inspect.isfunction(member) and not name.startswith("_"))


@pytest.mark.parametrize("name", backend_names())
def test_every_backend_implements_the_whole_protocol(name: str) -> None:
    backend = get_backend(name)
    assert isinstance(backend, Backend) and backend.name == name
    assert get_backend(name) is backend  # one shared instance: backends hold no state
    doors = [(backend, Backend, "")] + [(getattr(backend, g), p, g + ".") for g, p in GROUPS.items()]
    for obj, protocol, where in doors:
        for method in _methods(protocol):
            impl = getattr(type(obj), method, None)
            assert callable(impl), f"{name} lacks Backend.{where}{method}"
            want = [p for p in inspect.signature(getattr(protocol, method)).parameters]
            got = [p for p in inspect.signature(impl).parameters]
            assert got[: len(want)] == want, f"{name}.{where}{method}{got} does not take Backend.{where}{method}{want}"


def test_the_flat_methods_are_gone_one_door_per_call() -> None:
    """Each call has one door: a group's method is not also the backend's (no aliases)."""
    grouped = {m for p in GROUPS.values() for m in _methods(p)}
    for name in backend_names():
        backend = get_backend(name)
        top = {m for m in dir(backend) if not m.startswith("_") and callable(getattr(backend, m))}
        assert not (top & grouped), f"{name} answers {sorted(top & grouped)} both flat and grouped"
        assert {"effective_flags", "build_node_argvs", "read_log", "diagnose", "memory_plan"}.isdisjoint(top)


def test_unknown_backend_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown backend 'nope'; the supported backends are: " + ", ".join(backend_names())):
        get_backend("nope")


def test_sglang_answers_what_the_supervisor_asks() -> None:
    b = get_backend("sglang")
    one = parse_profile({"name": "x", "server": {"model-path": "/m", "tp": 8, "port": 31000}}, "x.yaml")
    assert b.launch.node_argvs(one) == [b.launch.argv(one)]
    assert b.launch.api_port(one.server) == 31000 and b.launch.api_port({}) == 30000
    assert b.launch.readiness_path("0.5.23") == "/ready" and b.launch.readiness_path("0.5.9") == "/health"
    assert b.launch.readiness_path(None) == "/health"
    assert b.metrics.path() == "/metrics" and b.metrics.prefix() == "sglang:"
    assert b.launch.rendezvous_addr({"dist-init-addr": "10.0.0.1:5000"}) == "10.0.0.1:5000"
    assert b.launch.rendezvous_addr({}) is None
    assert b.flags.value({"tensor-parallel-size": 4}, "tp") == 4  # any spelling the server accepts
    assert b.launch.gpus(["a"], {"tp": 2, "base-gpu-id": 4}, {}) == {("a", 4), ("a", 5)}
    assert b.flags.effective(one)["tp_size"] == 8
    assert b.flags.parse_overrides(["mem-fraction-static=0.88", "enable-metrics"]) == {
        "mem-fraction-static": 0.88, "enable-metrics": True}
    two = parse_profile({"name": "y", "hosts": [{"ssh": "n0"}, {"ssh": "n1"}],
                         "server": {"model-path": "/m", "tp": 16}}, "y.yaml")
    argvs = b.launch.node_argvs(two, None, "10.0.0.1:5000")
    assert len(argvs) == 2 and all("--dist-init-addr" in a for a in argvs)
    assert argvs[1][argvs[1].index("--node-rank") + 1] == "1"


@pytest.mark.parametrize("name", backend_names())
def test_declared_secret_flags_are_the_flag_tables_own(name: str) -> None:
    """A backend may declare its secret options (so that `diagnose` need not import every version's
    flag table to register them); the declaration must say what the tables say."""
    import importlib

    from cockpit.core.secrets import _SECRET_WORDS

    backend = get_backend(name)
    declared = getattr(backend, "secret_flags", None)
    if declared is None:
        pytest.skip(f"{name} reads its secret flags from its tables")
    flags = importlib.import_module(type(backend).__module__ + ".flags")
    from_tables = {o for version in (None, *flags.VERSIONS) for spec in flags.flag_table(version).values()
                   for o in spec.option_strings if _SECRET_WORDS.search(o.lstrip("-"))}
    assert from_tables and set(declared) == from_tables
