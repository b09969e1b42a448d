"""The TUI of a prefill/decode deployment (issue 25 item 4): the picker lists the deployment and its
two groups (`pd.prefill`, `pd.decode`, each marked live when its run is), a group's dashboard shows
both groups' phase, ranks and headroom under the header, and `g` opens the other group's dashboard
(asked first when that group has no run: opening it launches it). A real deployment: `cockpit up
pd.prefill` in a subprocess, the decode group launched from the TUI, both on the simulator (no GPU
here), free ports, each test its own HOME, runs and GPU directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.ui.app import CockpitApp
from cockpit.ui.screens.dashboard import DashboardScreen
from cockpit.ui.screens.dialogs import ConfirmScreen, QuitScreen
from cockpit.ui.screens.picker import PickerScreen
from cockpit.ui.widgets.groups import GroupsStrip, group_line, summarise
from cockpit.ui.widgets.keyhints import choose
from tests.conftest import free_port
from tests.ui.test_flows import wait_for

PY = sys.executable


@pytest.fixture
def pd_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[dict[str, str], Path]]:
    """profiles/pd.yaml in the working directory: prefill on GPUs 0–3, decode on 4–7 of one
    simulated 8-GPU host; the same environment in this process (the TUI) and the subprocesses."""
    sim_dir = tmp_path / "gpus"
    sim_dir.mkdir()
    work = tmp_path / "work"
    (work / "profiles").mkdir(parents=True)
    program = [PY, "-m", "cockpit", "sim", "--sim-gpu", "rtx-pro-6000", "--sim-speed", "200", "--sim-traffic", "none",
               "--sim-dir", str(sim_dir), "--sim-version", "0.5.9"]
    (work / "profiles" / "pd.yaml").write_text(
        f"name: pd\nversion: 0.5.9\nprogram: {json.dumps(program)}\nworkdir: {tmp_path / 'srv'}\nlog: logs/sglang.log\n"
        f"env: {{COCKPIT_SIM_GPU_DIR: '{sim_dir}'}}\n"
        "server:\n  model-path: /models/Llama-3.1-8B-Instruct\n  tp: 4\n  mem-fraction-static: 0.88\n"
        f"groups:\n  prefill:\n    gpus: 4\n    server: {{port: {free_port()}, disaggregation-mode: prefill}}\n"
        f"  decode:\n    gpus: 4\n    server: {{port: {free_port()}, base-gpu-id: 4, disaggregation-mode: decode}}\n")
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
           "XDG_DATA_HOME": str(tmp_path / "xdg-data"), "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"),
           "COCKPIT_RUNS_ROOT": str(tmp_path / "runs"), "COCKPIT_SIM_GPU_DIR": str(sim_dir)}
    for var, value in env.items():
        Path(value).mkdir(exist_ok=True)
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.chdir(work)
    sub = dict(os.environ)
    sub["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    yield sub, work
    for role in ("prefill", "decode"):  # whatever a test left running, by the run's own record
        _cockpit(sub, work, "down", f"pd.{role}", "--timeout", "3")


def _cockpit(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "cockpit", *args], env=env, capture_output=True, text=True, timeout=120, cwd=cwd)


def _groups(env: dict[str, str], cwd: Path) -> dict[str, dict[str, object]]:
    out = _cockpit(env, cwd, "status", "pd", "--json")
    assert out.returncode in (0, 1), out.stderr
    return {g["group"]: g for g in json.loads(out.stdout)["groups"]}


def _least_after_capture(group: dict[str, object]) -> float:
    ranks = group["ranks"]
    assert isinstance(ranks, list)
    return min(float(r["avail_after_capture_gb"]) for r in ranks)


def _dashboard(app: CockpitApp) -> DashboardScreen:
    assert isinstance(app.screen, DashboardScreen), app.screen
    return app.screen


def _strip(app: CockpitApp) -> str:
    return _dashboard(app).query_one(GroupsStrip).text()


async def test_picker_and_dashboard_show_both_groups_and_g_switches(pd_env: tuple[dict[str, str], Path]) -> None:
    env, work = pd_env
    up = _cockpit(env, work, "up", "pd.prefill", "--wait", "ready", "--timeout", "90")
    assert up.returncode == 0, up.stdout + up.stderr
    prefill = _groups(env, work)["prefill"]
    prefill_run = prefill["run"]
    assert isinstance(prefill_run, dict)

    app = CockpitApp()
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        picker = app.screen
        assert isinstance(picker, PickerScreen)
        # the deployment, then its two groups; the prefill group's run is live
        await wait_for(pilot, lambda: any(p.stem == "pd" for p in picker.groups), 30, "the groups listed")
        ol = picker.query_one("#picker-list")
        rows = [str(ol.get_option_at_index(i).prompt) for i in range(ol.option_count)]  # type: ignore[attr-defined]
        at = [r.split()[0] for r in rows].index("pd")
        assert rows[at].startswith("pd  prefill/decode")
        assert rows[at + 1].startswith("  ├ pd.prefill") and rows[at + 2].startswith("  └ pd.decode"), rows
        await wait_for(pilot, lambda: "● live" in str(ol.get_option_at_index(at + 1).prompt), 30, "the prefill group live")  # type: ignore[attr-defined]
        assert "● live" not in str(ol.get_option_at_index(at + 2).prompt)  # type: ignore[attr-defined]
        # the deployment's row says what its rows open; nothing is launched from it
        ol.highlighted = at  # type: ignore[attr-defined]
        await wait_for(pilot, lambda: picker.preview is not None and picker.preview.profile is not None
                       and picker.preview.group is None and picker.preview.path.stem == "pd"
                       # the list refills when the live marks arrive, and a refill highlights again
                       # ("checking pd.yaml…") while the last preview is still held: wait for the text
                       and "prefill/decode deployment" in str(picker.query_one("#preview-text").render())
                       # and read after the live marks (one preview read before them said "no live run")
                       and "● live" in str(picker.query_one("#preview-text").render()),
                       30, "the deployment's preview with the prefill group live")
        text = str(picker.query_one("#preview-text").render())
        assert "prefill/decode deployment" in text and f"prefill group pd.prefill: local · ● live ({prefill_run['id']})" in text
        assert "decode group pd.decode: local · no live run" in text

        # the prefill group's row opens its dashboard, attached to the live run: both groups shown
        ol.highlighted = at + 1  # type: ignore[attr-defined]
        await wait_for(pilot, lambda: picker.preview is not None and picker.preview.group == "prefill", 20, "the group's preview")
        assert "--disaggregation-mode prefill" in str(picker.query_one("#preview-text").render())
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen), 10, "the prefill dashboard")
        dash = _dashboard(app)
        assert dash.profile.name == "pd.prefill" and dash.group == "prefill"
        await wait_for(pilot, lambda: "decode group pd.decode · phase UNKNOWN · no run" in _strip(app), 30, "the decode line")
        await wait_for(pilot, lambda: "▶ prefill group pd.prefill · phase READY · 4 ranks" in _strip(app), 30, "the prefill line")
        assert dash.snapshot is not None and dash.snapshot.run is not None and dash.snapshot.run.id == prefill_run["id"]
        assert f"headroom {_least_after_capture(prefill):.1f} GiB after capture (least of 4 ranks)" in _strip(app)
        assert ("g", "Other group") in choose(140, False, groups=True)  # the footer shows the key here

        # `g`: the decode group has no run, so it asks first; yes opens its dashboard, which launches it
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 10, "the question")
        assert "pd.decode has no run" in str(app.screen.query_one(".dialog-title").render())
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.group == "decode", 20, "the decode dashboard")
        await wait_for(pilot, lambda: _dashboard(app).snapshot is not None
                       and _dashboard(app).snapshot.state.phase == "ready", 120, "the decode group READY")  # type: ignore[union-attr]
        await wait_for(pilot, lambda: "prefill group pd.prefill · phase READY · 4 ranks" in _strip(app), 30, "the prefill line again")
        await wait_for(pilot, lambda: "▶ decode group pd.decode · phase READY · 4 ranks" in _strip(app), 30, "the decode line")
        groups = _groups(env, work)
        assert groups["prefill"]["run"] == prefill_run or groups["prefill"]["run"]["id"] == prefill_run["id"]  # type: ignore[index]
        assert {r["gpu"]["index"] for r in groups["decode"]["ranks"]} == {4, 5, 6, 7}  # type: ignore[attr-defined, index]
        strip = _strip(app)
        for role in ("prefill", "decode"):
            assert f"headroom {_least_after_capture(groups[role]):.1f} GiB after capture" in strip, (role, strip)
        # back to the prefill group: no question now, its run is attached again (not relaunched)
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.group == "prefill", 20, "the prefill dashboard")
        await wait_for(pilot, lambda: _dashboard(app).snapshot is not None and _dashboard(app).snapshot.run is not None, 30, "attach")  # type: ignore[union-attr]
        assert _dashboard(app).snapshot.run.id == prefill_run["id"]  # type: ignore[union-attr]
        await pilot.press("q")
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.return_code is not None, 20, "the app to exit")
    # both groups keep running after the TUI leaves (the fixture stops them)
    groups = _groups(env, work)
    assert [groups[r]["phase"] for r in ("prefill", "decode")] == ["ready", "ready"]


async def test_tui_names_a_group_and_refuses_a_group_of_a_plain_profile(pd_env: tuple[dict[str, str], Path]) -> None:
    env, work = pd_env
    (work / "profiles" / "plain.yaml").write_text("name: plain\nserver: {model-path: /models/x, port: 30000}\n")
    bad = _cockpit(env, work, "tui", "plain.decode")
    assert bad.returncode == 2 and "plain declares no prefill/decode groups, so there is no 'plain.decode'" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr
    missing = _cockpit(env, work, "tui", "pd.middle")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    # `cockpit tui pd.decode` opens the decode group's dashboard (what the command hands the app)
    from cockpit.core.profile import load_profile

    app = CockpitApp(profile=load_profile(work / "profiles" / "pd.yaml"), start_group="decode", supervisor_factory=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        dash = _dashboard(app)
        assert dash.profile.name == "pd.decode" and dash.profile.server["base-gpu-id"] == 4
        assert _strip(app).splitlines() == ["  prefill group pd.prefill · phase UNKNOWN · no run",
                                            "▶ decode group pd.decode · phase UNKNOWN · no run"]
    # the deployment itself (the picker's deployment row, `cockpit tui pd`) opens the prefill group's
    whole = CockpitApp(profile=load_profile(work / "profiles" / "pd.yaml"), supervisor_factory=None)
    async with whole.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert _dashboard(whole).profile.name == "pd.prefill" and _dashboard(whole).group == "prefill"
        assert _strip(whole).startswith("▶ prefill group pd.prefill")


def test_a_group_without_graphs_shows_its_headroom_after_the_kv_pool() -> None:
    """A real prefill server captures no decode graphs (SGLang: "Cuda graph is disabled for prefill
    server"): its line takes the least free memory after the KV pool, and says so."""
    from cockpit.core.state import RankMemory, RunState
    from cockpit.supervisor.api import RunInfo, RunSnapshot

    state = RunState(phase="ready", ranks={
        "TP0": RankMemory("TP0", avail_before_capture_gb=21.66),
        "TP1": RankMemory("TP1", avail_before_capture_gb=21.40),
    })
    run = RunInfo("r1", "pd.prefill", ("gpu-a",), 10, 10, "2026-12-01T00:00:00Z", "/run", "/log")
    snap = RunSnapshot(taken_at=0.0, profile="pd.prefill", lifecycle="running", state=state, findings=(), run=run)
    s = summarise("prefill", "pd.prefill", snap)
    assert group_line(s, True).plain == ("▶ prefill group pd.prefill · phase READY · 2 ranks · "
                                         "headroom 21.4 GiB after KV pool (least of 2 ranks)")
    state.ranks["TP0"].avail_after_capture_gb = 9.5  # once a rank captured, after capture
    assert "headroom 9.5 GiB after capture" in group_line(summarise("prefill", "pd.prefill", snap), False).plain
    loading = summarise("decode", "pd.decode", RunSnapshot(0.0, "pd.decode", "running", RunState(phase="loading"), (), run))
    assert group_line(loading, False).plain == "  decode group pd.decode · phase LOADING · 0 ranks · headroom not measured yet"
    unread = summarise("decode", "pd.decode", None, error="ssh: gpu-b unreachable")
    assert group_line(unread, False).plain == "  decode group pd.decode · phase UNKNOWN · not read: ssh: gpu-b unreachable"
