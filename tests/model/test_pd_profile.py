"""One profile that declares a prefill group, a decode group and the router (issue 25 item 4):
the schema's errors name the key (exit 2), `cockpit plan PROFILE` plans each group with its own
hosts, flags, GPUs and budget and shows the router, `cockpit up NAME.prefill` runs one group as a
profile, and `cockpit status PROFILE` shows both groups of the running deployment — real
subprocesses, the simulator for the GPUs, free ports, profiles on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.core.profile import ProfileError, parse_profile
from tests.conftest import free_port
from tests.data.models import synth
from tests.model.test_plan import cockpit

PY = sys.executable


def _pd_yaml(model: Path, *, extra: str = "", prefill_server: str = "disaggregation-mode: prefill",
             decode_server: str = "disaggregation-mode: decode") -> str:
    return (f"name: pd\nversion: 0.5.9\nserver:\n  model-path: {model}\n  tp: 2\n  mem-fraction-static: 0.85\n"
            f"groups:\n  prefill:\n    gpus: 2\n    server: {{{prefill_server}, port: 30000, disaggregation-bootstrap-port: 8998}}\n"
            f"  decode:\n    server: {{{decode_server}, port: 30001, tp: 4}}\nrouter: {{port: 8000}}\n{extra}")


@pytest.fixture
def model(tmp_path: Path) -> Path:
    d = tmp_path / "Qwen3-32B"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(synth.load_config("qwen3-32b")))
    return d


def test_a_group_is_its_own_profile_over_the_top_level() -> None:
    prof = parse_profile({"name": "pd", "log": "logs/sglang.log", "env": {"A": "1"}, "server": {"model-path": "/m", "tp": 2},
                          "groups": {"prefill": {"server": {"disaggregation-mode": "prefill"}},
                                     "decode": {"hosts": [{"ssh": "gpu2"}], "env": {"A": "2"},
                                                "server": {"tp": 4, "disaggregation-mode": "decode"}}}})
    pre, dec = (g for _, g in prof.group_profiles())
    assert (pre.name, pre.server, pre.log, [h.label for h in pre.hosts]) == (
        "pd.prefill", {"model-path": "/m", "tp": 2, "disaggregation-mode": "prefill"}, "logs/sglang.prefill.log", ["local"])
    assert (dec.name, dec.server["tp"], dec.env, [h.label for h in dec.hosts]) == ("pd.decode", 4, {"A": "2"}, ["gpu2"])
    assert dec.groups is None and dec.router is None


@pytest.mark.parametrize(("data", "key", "words"), [
    ({"groups": {"prefill": {}}}, "(top level)", "decode is missing"),
    ({"groups": {"prefill": {}, "decode": {"gpu": 2}}}, "groups.decode.gpu", "allowed here: hosts, gpus, server, env, log"),
    ({"groups": {"prefill": {}, "middle": {}}}, "groups.middle", "'prefill' or 'decode'"),
    ({"groups": {"prefill": {"gpus": 0}, "decode": {}}}, "groups.prefill.gpus", "greater than or equal to 1"),
    ({"groups": {"prefill": {"server": {"x": "-y"}}, "decode": {}}}, "groups.prefill.server", "must not start with '-'"),
    ({"router": {"port": 8000}}, "(top level)", "declare groups: first"),
    ({"groups": {"prefill": {}, "decode": {}}, "router": {"prot": 1}}, "router.prot", "allowed here: host, port, program, args"),
    ({"groups": {"prefill": {}, "decode": {}}, "router": {"port": 70000}}, "router.port", "less than or equal to 65535"),
])
def test_the_schema_names_the_key(data: dict[str, object], key: str, words: str) -> None:
    with pytest.raises(ProfileError) as exc:
        parse_profile({"name": "pd", **data}, "pd.yaml")
    assert exc.value.key == key and words in exc.value.problem, str(exc.value)


def test_plan_plans_each_group_with_its_own_budget_and_shows_the_router(tmp_path: Path, model: Path) -> None:
    prof = tmp_path / "pd.yaml"
    prof.write_text(_pd_yaml(model))
    res = cockpit("plan", str(prof), "--gpu-mem-gb", "79.6", "--no-calibration", "--json", env_root=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    out = json.loads(res.stdout)
    g = out["groups"]
    assert [(x["profile"], x["group"], x["tp"]) for x in g] == [("pd.prefill", "prefill", 2), ("pd.decode", "decode", 4)]
    assert g[0]["terms_gib"]["graph_gib"] == 0.0 < g[1]["terms_gib"]["graph_gib"]  # a prefill server captures no decode graphs
    assert g[0]["weights_gib_per_rank"] == pytest.approx(2 * g[1]["weights_gib_per_rank"], rel=0.01)
    assert out["router"]["argv"][1:] == ["-m", "sglang_router.launch_router", "--pd-disaggregation",
                                         "--prefill", "http://127.0.0.1:30000", "8998", "--decode", "http://127.0.0.1:30001",
                                         "--host", "0.0.0.0", "--port", "8000"]
    text = cockpit("plan", str(prof), "--gpu-mem-gb", "79.6", "--no-calibration", env_root=tmp_path).stdout
    assert "group 1 of 2: pd.prefill" in text and "group 2 of 2: pd.decode" in text
    assert "router on local port 8000 (no GPU memory: not planned)" in text


def test_the_prefill_groups_gpus_bound_its_plan(tmp_path: Path, model: Path) -> None:
    prof = tmp_path / "pd.yaml"
    prof.write_text(_pd_yaml(model).replace("gpus: 2", "gpus: 1"))
    res = cockpit("plan", str(prof), "--gpu-mem-gb", "79.6", "--no-calibration", env_root=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stdout + res.stderr


def test_a_group_whose_flags_make_another_role_is_exit_2(tmp_path: Path, model: Path) -> None:
    prof = tmp_path / "pd.yaml"
    prof.write_text(_pd_yaml(model, decode_server="disaggregation-mode: prefill"))
    res = cockpit("plan", str(prof), "--gpu-mem-gb", "79.6", "--no-calibration", env_root=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "groups.decode.server: the flags make a prefill server" in res.stderr and "disaggregation-mode: decode" in res.stderr
    prof.write_text(_pd_yaml(model, prefill_server="trust-remote-code: true"))
    res = cockpit("plan", str(prof), "--gpu-mem-gb", "79.6", "--no-calibration", env_root=tmp_path)
    assert res.returncode == 2 and "groups.prefill.server: the flags make a server of no prefill/decode role" in res.stderr


def test_a_vllm_router_needs_its_program(tmp_path: Path, model: Path) -> None:
    prof = tmp_path / "pd.yaml"
    kv = "kv-transfer-config: '{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"%s\"}'"
    prof.write_text(f"name: pd\nbackend: vllm\nversion: 0.19.0\nserver:\n  model: {model}\n  tensor-parallel-size: 2\n"
                    f"groups:\n  prefill:\n    server: {{{kv % 'kv_producer'}, port: 8100}}\n"
                    f"  decode:\n    server: {{{kv % 'kv_consumer'}, port: 8200}}\nrouter: {{port: 8000}}\n")
    res = cockpit("plan", str(prof), "--gpu-mem-gb", "79.6", "--no-calibration", env_root=tmp_path)
    assert res.returncode == 2 and "router.program" not in res.stdout and "vLLM has no built-in" in res.stderr, res.stderr
    prof.write_text(prof.read_text().replace("router: {port: 8000}", "router: {port: 8000, program: [python3, proxy.py], args: [--port, '8000']}"))
    res = cockpit("plan", str(prof), "--gpu-mem-gb", "79.6", "--no-calibration", "--json", env_root=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    out = json.loads(res.stdout)
    assert [x["role"] for x in out["groups"]] == ["prefill", "decode"] and out["router"]["argv"] == ["python3", "proxy.py", "--port", "8000"]


# ---- a running deployment: both groups on the simulator ------------------------------------------

@pytest.fixture
def sim_env(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    (tmp_path / "profiles").mkdir()
    program = [PY, "-m", "cockpit", "sim", "--sim-gpu", "rtx-pro-6000", "--sim-speed", "200", "--sim-traffic", "none",
               "--sim-dir", str(sim_dir), "--sim-version", "0.5.9"]
    (tmp_path / "profiles" / "pd.yaml").write_text(
        f"name: pd\nversion: 0.5.9\nprogram: {json.dumps(program)}\nworkdir: {tmp_path / 'work'}\nlog: logs/sglang.log\n"
        f"env: {{COCKPIT_SIM_GPU_DIR: '{sim_dir}'}}\n"
        "server:\n  model-path: /models/Llama-3.1-8B-Instruct\n  tp: 4\n  mem-fraction-static: 0.88\n"
        f"groups:\n  prefill:\n    gpus: 4\n    server: {{port: {free_port()}, disaggregation-mode: prefill}}\n"
        f"  decode:\n    gpus: 4\n    server: {{port: {free_port()}, base-gpu-id: 4, disaggregation-mode: decode}}\n")
    env = dict(os.environ)
    env.update({"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"), "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
                "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"), "COCKPIT_RUNS_ROOT": str(tmp_path / "runs"),
                "COCKPIT_SIM_GPU_DIR": str(sim_dir), "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    env.pop("SSH_AUTH_SOCK", None)
    yield env, tmp_path
    for role in ("prefill", "decode"):
        _run(env, tmp_path, "down", f"pd.{role}", "--timeout", "3")


def _run(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "cockpit", *args], env=env, capture_output=True, text=True, timeout=120, cwd=cwd)


def test_status_shows_both_groups_of_a_running_deployment(sim_env: tuple[dict[str, str], Path]) -> None:
    env, root = sim_env
    none = _run(env, root, "status", "pd", "--json")
    assert none.returncode == 0, none.stderr
    assert [(g["group"], g["profile"], g["run"]) for g in json.loads(none.stdout)["groups"]] == [
        ("prefill", "pd.prefill", None), ("decode", "pd.decode", None)]
    whole = _run(env, root, "up", "pd")  # two groups are never launched as one plain server
    assert whole.returncode == 2 and "cockpit up one of them, pd.prefill or pd.decode" in whole.stderr, whole.stderr
    assert not (root / "runs" / "pd").exists()
    up = _run(env, root, "up", "pd.prefill", "--wait", "ready", "--timeout", "90")
    assert up.returncode == 0, up.stdout + up.stderr
    st = _run(env, root, "status", "pd", "--json")
    groups = json.loads(st.stdout)["groups"]
    assert [g["group"] for g in groups] == ["prefill", "decode"]
    assert groups[0]["phase"] == "ready" and len(groups[0]["ranks"]) == 4 and groups[1]["run"] is None
    assert "/logs/sglang.prefill." in groups[0]["run"]["log_path"]  # each group its own log
    up = _run(env, root, "up", "pd.decode", "--wait", "ready", "--timeout", "90")
    assert up.returncode == 0, up.stdout + up.stderr
    st = _run(env, root, "status", "pd", "--json")
    assert st.returncode in (0, 1), st.stderr
    groups = json.loads(st.stdout)["groups"]
    assert [(g["group"], g["phase"], len(g["ranks"])) for g in groups] == [("prefill", "ready", 4), ("decode", "ready", 4)]
    assert {r["gpu"]["index"] for r in groups[1]["ranks"]} == {4, 5, 6, 7}  # the decode group's own GPUs
    text = _run(env, root, "status", "pd").stdout
    assert "prefill group · phase READY" in text and "decode group · phase READY" in text
    rows = [ln.split() for ln in text.splitlines() if ln.startswith(("prefill ", "decode ")) and " TP" in ln]
    assert [r[:2] for r in rows] == [["prefill", f"TP{i}"] for i in range(4)] + [["decode", f"TP{i}"] for i in range(4)]


def test_the_supervisor_never_launches_both_groups_as_one_server() -> None:
    """The TUI's launch goes through Supervisor.start, not `cockpit up`: it refuses too."""
    import asyncio

    from cockpit.supervisor.supervisor import LaunchFailed, Supervisor

    prof = parse_profile({"name": "pd", "server": {"model-path": "org/m"},
                          "groups": {"prefill": {"server": {"disaggregation-mode": "prefill"}},
                                     "decode": {"server": {"disaggregation-mode": "decode"}}}})
    with pytest.raises(LaunchFailed, match=r"pd\.prefill and pd\.decode"):
        asyncio.run(Supervisor(prof).launch())


def test_check_takes_one_group_and_refuses_the_whole(tmp_path: Path, model: Path) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "pd.yaml").write_text(_pd_yaml(model))
    whole = cockpit("check", "pd", "--gpu-mem-gb", "79.6", env_root=tmp_path)
    assert whole.returncode == 2 and "cockpit check one of them, pd.prefill or pd.decode" in whole.stderr, whole.stderr
    one = cockpit("check", "pd.decode", "--gpu-mem-gb", "79.6", "--json", env_root=tmp_path)
    assert one.returncode in (0, 1), one.stderr
    plan = next(f for f in json.loads(one.stdout)["findings"] if f["id"] == "memory_plan")
    assert "memory plan not made" not in plan["message"], plan
