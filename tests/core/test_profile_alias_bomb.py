"""Issue 40, finding 16: a YAML alias bomb passes the profile guards.

The size and nesting checks see the text; aliases (`*name`) repeat a node without repeating its
text, so a 0.4 KB profile whose anchors each repeat the one before ten times expands to 10^6 values
(10^7 with one level more): before, `cockpit check` took ~8 s and 85 MB for 10^6 and printed the
whole expansion as the command line. The loader counts what the aliases expand to before it builds
anything, and refuses past a bound, naming the file. Aliases that add little (a shared host list,
`<<: *defaults`) still load. The picker, which loads every file of the profiles folder, lists the
bomb as an error and loads the others.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.core.profile import ProfileError, load_profile
from tests.ui.test_picker import profiles_here  # noqa: F401 - the picker tests' profiles folder, a fixture


def bomb(levels: int) -> str:
    """Anchors a..: each a list of ten aliases of the one before, under a JSON-valued flag (the
    loader accepts any mapping there, and before the fix walked and dumped all of it)."""
    names = "abcdefghij"[:levels]
    rows = [f"    {names[0]}: &{names[0]} [x, x, x, x, x, x, x, x, x, x]"]
    for prev, n in itertools.pairwise(names):
        rows.append(f"    {n}: &{n} [" + ", ".join([f"*{prev}"] * 10) + "]")
    return "name: bomb\nbackend: vllm\nserver:\n  model: m\n  kv-transfer-config:\n" + "\n".join(rows) + "\n"


def test_a_small_alias_bomb_is_refused_naming_the_file(tmp_path: Path) -> None:
    p = tmp_path / "bomb.yaml"
    p.write_text(bomb(7))  # 10^7 values from ~0.4 KB
    assert len(p.read_bytes()) < 500
    # through the CLI: a bounded wait that the unbounded expansion (~80 s for 10^7) cannot meet
    r = subprocess.run([sys.executable, "-m", "cockpit", "check", str(p)], capture_output=True, text=True,
                       timeout=60, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}, cwd=tmp_path, check=False)
    assert r.returncode == 2, r.stdout[:500] + r.stderr[:500]
    assert str(p) in r.stderr and "alias" in r.stderr and "Traceback" not in r.stderr, r.stderr
    with pytest.raises(ProfileError) as err:
        load_profile(p)
    assert err.value.path == str(p) and "expand" in err.value.problem


def test_a_self_referring_alias_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "loop.yaml"
    p.write_text("name: loop\nbackend: vllm\nserver:\n  model: m\n  kv-transfer-config: &c {again: *c}\n")
    with pytest.raises(ProfileError) as err:
        load_profile(p)
    assert "itself" in err.value.problem


def test_modest_aliases_still_load(tmp_path: Path) -> None:
    p = tmp_path / "ok.yaml"
    p.write_text("name: ok\nhosts: &nodes [{ssh: a@gpu-1}, {ssh: a@gpu-2}]\nenv: &e {A: '1'}\n"
                 "server:\n  tp: 2\n  kv-transfer-config: {nodes: [gpu-1, gpu-2], env: *e}\n")
    prof = load_profile(p)
    assert [h.ssh for h in prof.hosts] == ["a@gpu-1", "a@gpu-2"] and prof.env == {"A": "1"}


async def test_the_picker_lists_a_bomb_as_an_error_and_loads_the_others(profiles_here: Path) -> None:  # noqa: F811
    from cockpit.ui.app import CockpitApp
    from cockpit.ui.screens.picker import PickerScreen
    from tests.ui.test_picker import _wait_preview

    (profiles_here / "a-bomb.yaml").write_text(bomb(7))  # beside test_picker's good and broken profiles
    app = CockpitApp(supervisor_factory=None)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PickerScreen)
        stems = [p.stem for p in screen.paths]
        assert {"a-bomb", "local-hicache300", "broken"} <= set(stems)
        ol = screen.query_one("#picker-list")
        ol.highlighted = stems.index("a-bomb")  # type: ignore[attr-defined]
        await _wait_preview(pilot, screen, "a-bomb")
        assert screen.preview is not None and screen.preview.error is not None
        text = str(screen.query_one("#preview-text").render())
        assert "a-bomb.yaml" in text and "alias" in text, text
        ol.highlighted = stems.index("local-hicache300")  # type: ignore[attr-defined]
        await _wait_preview(pilot, screen, "local-hicache300")
        assert screen.preview is not None and screen.preview.argv is not None  # the others still load
        await pilot.press("q")
