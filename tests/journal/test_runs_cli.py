"""`cockpit runs` as an operator runs it: a real subprocess, a journal under XDG_DATA_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.journal import Journal

from .helpers import crashed_state, low_headroom_finding, ready_state, run_info

FLAGS = {"model-path": "/models/Kimi-K2.5", "tp": 8, "hicache-size": 48, "enable-hierarchical-cache": True}


def cockpit(data: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_DATA_HOME": str(data)}
    return subprocess.run([sys.executable, "-m", "cockpit", *argv], capture_output=True, text=True, env=env,
                          timeout=60)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A journal with the afternoon in it: 0.93 crashed, 0.88 ready, and a demo run."""
    data = tmp_path_factory.mktemp("xdg")
    with Journal.open(data / "cockpit" / "journal.sqlite3") as j:
        j.record_start(run_info("20261129-080000-a93", started_at="2026-11-29T08:00:00+00:00"), "kimi-k2.5-tp8",
                       {**FLAGS, "mem-fraction-static": 0.93})
        j.record_progress("20261129-080000-a93", crashed_state(), [low_headroom_finding()])
        j.record_end("20261129-080000-a93", "crashed", crashed_state(), [low_headroom_finding()])
        j.record_start(run_info("20261129-090000-b88", started_at="2026-11-29T09:00:00+00:00"), "kimi-k2.5-tp8",
                       {**FLAGS, "mem-fraction-static": 0.88})
        j.record_progress("20261129-090000-b88", ready_state(), [])
        j.record_start(run_info("20261129-100000-demo", profile="demo", started_at="2026-11-29T10:00:00+00:00"),
                       "demo", {"tp": 2})
    return data


def test_runs_json_lists_every_run_newest_first(data: Path) -> None:
    out = cockpit(data, "runs", "--json")
    assert out.returncode == 0, out.stderr
    runs = json.loads(out.stdout)
    assert [r["id"] for r in runs] == ["20261129-100000-demo", "20261129-090000-b88", "20261129-080000-a93"]
    by_id = {r["id"]: r for r in runs}
    crashed, ready = by_id["20261129-080000-a93"], by_id["20261129-090000-b88"]
    assert (crashed["outcome"], crashed["crash_kind"], crashed["crash_phase"]) == ("crashed", "cuda_oom", "prefill")
    assert (ready["outcome"], ready["crash_kind"], ready["ended_at"]) == ("ready", None, None)
    assert crashed["flags"]["mem-fraction-static"] == 0.93 and ready["flags"]["mem-fraction-static"] == 0.88
    assert crashed["min_headroom_gb"] == 0.82 and ready["min_headroom_gb"] == 5.5
    assert crashed["max_total_num_tokens"] > ready["max_total_num_tokens"]
    assert ready["peak_gen_throughput"] == 3010.0
    assert by_id["20261129-100000-demo"]["min_headroom_gb"] is None


def test_runs_profile_filter(data: Path) -> None:
    out = cockpit(data, "runs", "--json", "--profile", "demo")
    assert [r["id"] for r in json.loads(out.stdout)] == ["20261129-100000-demo"]


def test_runs_table_says_what_changed(data: Path) -> None:
    out = cockpit(data, "runs")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:4] == ["ID", "PROFILE", "STARTED", "OUTCOME"]
    b88 = next(line for line in lines if line.startswith("20261129-090000-b88"))
    assert "5.50 GiB" in b88 and "174,617" in b88 and "mem-fraction-static 0.93→0.88" in b88
    a93 = next(line for line in lines if line.startswith("20261129-080000-a93"))
    assert "crashed: cuda_oom (prefill, TP3)" in a93 and "0.82 GiB" in a93
    demo = next(line for line in lines if line.startswith("20261129-100000-demo"))
    assert "—" in demo and " 0 " not in demo  # unknown is never 0


def test_runs_compare_shows_both_runs_differing_flags(data: Path) -> None:
    out = cockpit(data, "runs", "compare", "20261129-08", "20261129-09")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "20261129-080000-a93" in text.splitlines()[0] and "20261129-090000-b88" in text.splitlines()[0]
    row = next(line for line in text.splitlines() if line.startswith("--mem-fraction-static"))
    assert row.split()[1:] == ["0.93", "0.88"]
    assert "--tp" not in text  # the same in both: not a difference
    headroom = next(line for line in text.splitlines() if line.startswith("min headroom"))
    assert "0.82 GiB" in headroom and "5.50 GiB" in headroom
    kv = next(line for line in text.splitlines() if line.startswith("KV tokens"))
    assert kv.split()[2:] == ["246,890", "174,617"]
    assert "cuda_oom" in text


def test_runs_compare_json(data: Path) -> None:
    out = cockpit(data, "runs", "compare", "20261129-080000-a93", "20261129-090000-b88", "--json")
    doc = json.loads(out.stdout)
    assert [r["id"] for r in doc["runs"]] == ["20261129-080000-a93", "20261129-090000-b88"]
    assert doc["differing_flags"] == {"mem-fraction-static": [0.93, 0.88]}


def test_runs_show(data: Path) -> None:
    out = cockpit(data, "runs", "show", "20261129-08")
    assert out.returncode == 0, out.stderr
    assert "crashed: cuda_oom (prefill, TP3)" in out.stdout
    assert "torch.OutOfMemoryError" in out.stdout
    assert "--mem-fraction-static 0.93 → 0.88" in out.stdout
    assert "TP0 0.82 GiB" in out.stdout
    js = json.loads(cockpit(data, "runs", "show", "20261129-09", "--json").stdout)
    assert js["id"] == "20261129-090000-b88" and len(js["gen_throughput_series"]) == 3


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("runs", "show", "nosuchrun"), "no run 'nosuchrun'"),
        (("runs", "show", "20261129"), "fits 3 runs"),
        (("runs", "compare", "20261129-08"), "at least two"),
    ],
)
def test_bad_ids_are_bad_input(data: Path, argv: tuple[str, ...], words: str) -> None:
    out = cockpit(data, *argv)
    assert out.returncode == 2, out
    assert words in out.stderr and "Traceback" not in out.stderr


def test_an_empty_journal(tmp_path: Path) -> None:
    out = cockpit(tmp_path, "runs")
    assert out.returncode == 0 and "no runs" in out.stdout
    out = cockpit(tmp_path, "runs", "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == []
    assert not (tmp_path / "cockpit").exists()  # reading the journal never creates one
