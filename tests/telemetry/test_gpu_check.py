"""bench/gpu_check.sh: the NVML gateway and the nvidia-smi path side by side.

No GPU here: the nvidia-smi side is the test-placed nvidia-smi (tests/conftest.py), read through
the agent's real SmiSource; the NVML side is a recorded sample in the agent's JSON shape (what
`cockpit.telemetry.nvml.read_raw` returns), agreeing or not by a chosen margin. On a GPU machine
the script reads NVML itself.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from cockpit.telemetry.hostfacts import smi_raw

if TYPE_CHECKING:
    from tests.conftest import FakeNvidiaSmi

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.sh"


def _gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


def _scaled(sample: dict[str, Any], factor: float) -> dict[str, Any]:
    """The same reading with every memory figure scaled (as NVML would report a drifted value)."""
    out = copy.deepcopy(sample)
    out["source"] = "nvml"
    for g in out["gpus"]:
        g["mem_used_mib"] = g["mem_used_mib"] * factor
    for p in out["procs"]:
        p["mem_used_mib"] = p["mem_used_mib"] * factor
    return out


def test_the_smi_path_parses_the_test_placed_nvidia_smi(fake_nvidia_smi: FakeNvidiaSmi) -> None:
    smi = smi_raw({"PATH": fake_nvidia_smi.path_env})
    assert smi is not None and smi["source"] == "nvidia-smi"
    assert [(g["index"], g["mem_used_mib"], g["mem_total_mib"], g["util_pct"]) for g in smi["gpus"]] == [
        (0, 40000.0, 81559.0, 97.0), (1, 1024.0, 81559.0, 0.0)]
    assert {(p["pid"], p["gpu_index"], p["mem_used_mib"]) for p in smi["procs"]} == {(4242, 0, 39000.0), (5151, 1, 512.0)}
    assert smi_raw({"PATH": "/nonexistent"}) is None  # no nvidia-smi: the path says so, never zeros


def test_agreement_within_one_percent(fake_nvidia_smi: FakeNvidiaSmi) -> None:
    gc = _gpu_check()
    smi = smi_raw({"PATH": fake_nvidia_smi.path_env})
    assert smi is not None
    rows = gc.compare(_scaled(smi, 1.005), smi)
    assert rows and all(r.agrees for r in rows), gc.render(rows)
    what = [r.what for r in rows]
    assert "GPU 0 memory used (MiB)" in what and "GPU 1 memory total (MiB)" in what
    assert "GPU 0 utilisation (%)" in what and "pid 4242 on GPU 0 memory (MiB)" in what
    assert "AGREE: all" in gc.render(rows)

    off = gc.compare(_scaled(smi, 1.02), smi)  # 2 % apart: memory used differs, totals still agree
    bad = {r.what for r in off if not r.agrees}
    assert bad == {"GPU 0 memory used (MiB)", "GPU 1 memory used (MiB)", "pid 4242 on GPU 0 memory (MiB)",
                   "pid 5151 on GPU 1 memory (MiB)"}
    assert "DIFFER: 4 of" in gc.render(off)

    # a value that moved between the two NVML reads agrees when nvidia-smi's lies between them
    moved = gc.compare(_scaled(smi, 0.9), smi, _scaled(smi, 1.1))
    assert all(r.agrees for r in moved)

    util = copy.deepcopy(smi)
    util["gpus"][0]["util_pct"] = 99.5  # 2.5 points off
    assert [r.what for r in gc.compare(util, smi) if not r.agrees] == ["GPU 0 utilisation (%)"]

    one_side = copy.deepcopy(smi)
    one_side["procs"] = one_side["procs"][:1]
    rows = gc.compare(one_side, smi, one_side)
    assert [(r.what, r.note) for r in rows if not r.agrees] == [("pid 5151 on GPU 1 memory (MiB)", "seen by nvidia-smi only")]


def test_the_script_end_to_end(fake_nvidia_smi: FakeNvidiaSmi, tmp_path: Path) -> None:
    smi = smi_raw({"PATH": fake_nvidia_smi.path_env})
    assert smi is not None
    env = {**os.environ, "PATH": fake_nvidia_smi.path_env, "PYTHON": sys.executable}
    good, bad = tmp_path / "nvml-good.json", tmp_path / "nvml-bad.json"
    good.write_text(json.dumps(_scaled(smi, 1.003)))
    bad.write_text(json.dumps(_scaled(smi, 1.05)))
    ok = subprocess.run([str(SCRIPT), "--nvml-from", str(good)], env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "AGREE: all 8 values" in ok.stdout
    no = subprocess.run([str(SCRIPT), "--nvml-from", str(bad), "--json"], env=env, capture_output=True, text=True,
                        timeout=120)
    assert no.returncode == 1, no.stdout + no.stderr
    out = json.loads(no.stdout)
    assert out["agree"] is False and any(r["what"] == "GPU 0 memory used (MiB)" and not r["agrees"] for r in out["rows"])
    fake_nvidia_smi.use("fail")  # the driver is gone: a path that cannot read is exit 2, with the reason
    gone = subprocess.run([str(SCRIPT), "--nvml-from", str(good)], env=env, capture_output=True, text=True, timeout=120)
    assert gone.returncode == 2 and "nvidia-smi path read no GPU" in gone.stderr, gone.stderr
