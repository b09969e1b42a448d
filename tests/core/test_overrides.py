"""Overrides: a run's changes to its profile's flags, normalised once where they come in (issue 37,
item 2). Any spelling of a flag the operator may type or a finding may carry gives the same value."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cockpit.core.findings import FlagChange
from cockpit.core.overrides import Overrides

WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)
VALUE = st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.text(max_size=6))


@st.composite
def spelled(draw: st.DrawFn, words: list[str]) -> str:
    """One flag (its words) as the operator, a YAML key or a finding may write it."""
    dashes = draw(st.sampled_from(["", "-", "--"]))
    joins = [draw(st.sampled_from(["-", "_"])) for _ in words[1:]]
    return dashes + words[0] + "".join(j + w for j, w in zip(joins, words[1:], strict=True))


@given(st.lists(st.tuples(st.lists(WORD, min_size=1, max_size=4), VALUE), max_size=5,
                unique_by=lambda f: "-".join(f[0])), st.data())
def test_any_spelling_of_a_flag_gives_the_same_overrides(flags: list[tuple[list[str], object]], data: st.DataObject) -> None:
    given_as: dict[str, object] = {}
    want: dict[str, object] = {}
    for words, value in flags:
        given_as[data.draw(spelled(words))] = value
        want["-".join(words)] = value
    assert Overrides(given_as) == want
    # one flag given twice, in two spellings: the later wins, as the operator's last --set does
    twice = [FlagChange(flag=data.draw(spelled(words)), from_value=None, to_value="first") for words, _ in flags]
    twice += [FlagChange(flag=data.draw(spelled(words)), from_value=None, to_value=value) for words, value in flags]
    assert Overrides(twice) == want
    assert Overrides.of(Overrides(given_as)) == Overrides(want)
    changes = [FlagChange(flag=name, from_value=None, to_value=value) for name, value in given_as.items()]
    assert Overrides(changes) == Overrides(given_as)
    assert all("_" not in k and not k.startswith("-") for k in Overrides(given_as))


def test_it_is_made_once_and_never_edited() -> None:
    ov = Overrides({"--mem_fraction_static": 0.8})
    assert Overrides.of(ov) is ov  # nothing is normalised twice
    with pytest.raises(AttributeError):
        ov._flags = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        ov["tp"] = 2  # type: ignore[index]
    later = ov | {"tp_size": 4} | [FlagChange(flag="--mem-fraction-static", from_value=0.8, to_value=0.7)]
    assert later == {"mem-fraction-static": 0.7, "tp-size": 4} and ov == {"mem-fraction-static": 0.8}
    assert later.without({"tp-size"}) == {"mem-fraction-static": 0.7}


def test_applied_to_a_profile_replaces_whatever_spelling_the_profile_used() -> None:
    server = {"model-path": "/m", "mem_fraction_static": 0.9, "--tp": 8}
    flags = Overrides({"mem-fraction-static": 0.8}).applied_to(server)
    assert flags == {"model-path": "/m", "--tp": 8, "mem-fraction-static": 0.8}
    assert Overrides().applied_to(server) == server
