"""The prefill/decode groups' controller (`ui/groupcontrol.py`) without Textual: which group is
the other one, the watch that reads it (a reader that answers as `read_run` does), and when
opening it launches its server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cockpit.core.profile import Profile, parse_profile
from cockpit.ui.groupcontrol import GroupControl
from tests.ui.story import story_snapshot


def _deployment(tmp_path: Path) -> Profile:
    return parse_profile({
        "name": "pd", "hosts": [{"ssh": "local"}],
        "server": {"model-path": "/models/Llama-3.1-8B-Instruct", "tp": 4, "mem-fraction-static": 0.88},
        "groups": {"prefill": {"gpus": 4, "server": {"disaggregation-mode": "prefill"}},
                   "decode": {"gpus": 4, "server": {"base-gpu-id": 4, "disaggregation-mode": "decode"}}},
    }, str(tmp_path / "pd.yaml"))


def test_a_plain_profiles_dashboard_has_no_groups() -> None:
    groups = GroupControl(None, None)
    assert not groups.active and groups.groups() == [] and groups.other() is None


def test_the_other_group_is_the_one_this_dashboard_does_not_follow(tmp_path: Path) -> None:
    groups = GroupControl(_deployment(tmp_path), "prefill")
    assert groups.active and groups.groups() == [("prefill", "pd.prefill"), ("decode", "pd.decode")]
    other = groups.other()
    assert other is not None and other[0] == "decode" and other[1].name == "pd.decode"


async def test_the_watch_reads_the_other_group_again_and_again_errors_included(tmp_path: Path) -> None:
    answers: list[tuple[Any, str | None]] = [(None, None), (None, "gpu-box-2: no route to host"),
                                             (story_snapshot(0.88, "ready"), None)]
    asked: list[str] = []

    async def read(profile: Profile) -> tuple[Any, str | None]:
        asked.append(profile.name)
        return answers[min(len(asked), len(answers)) - 1]

    posted: list[tuple[str, str, Any, str | None]] = []
    groups = GroupControl(_deployment(tmp_path), "decode", read=read, poll_s=0.01)
    watch = asyncio.create_task(groups.watch(lambda *read_: posted.append(read_)))
    for _ in range(200):
        await asyncio.sleep(0.01)
        if len(posted) >= 3:
            break
    watch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watch
    assert set(asked) == {"pd.prefill"}
    assert [(p[0], p[1], p[3]) for p in posted[:3]] == [("prefill", "pd.prefill", None),
                                                        ("prefill", "pd.prefill", "gpu-box-2: no route to host"),
                                                        ("prefill", "pd.prefill", None)]
    assert posted[2][2] is not None and posted[2][2].run is not None


def test_opening_launches_only_when_the_last_read_found_no_run() -> None:
    assert GroupControl.opening_launches(None, None)
    assert not GroupControl.opening_launches("20261129-115402-demo", None)
    assert not GroupControl.opening_launches(None, "unreachable")  # not known to have none
