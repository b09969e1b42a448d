"""One rank order everywhere: DP, then PP, then TP, then EP, each by number."""

from __future__ import annotations

from cockpit.core.ranks import rank_sort_key, sorted_ranks


def test_numbers_compare_as_numbers_in_dp_pp_tp_ep_order() -> None:
    assert sorted_ranks(["TP10", "TP9", "TP1", "TP0"]) == ["TP0", "TP1", "TP9", "TP10"]
    assert sorted_ranks(["DP1 TP0", "DP0 TP15", "DP0 TP3"]) == ["DP0 TP3", "DP0 TP15", "DP1 TP0"]
    assert sorted_ranks(["PP1 TP0", "PP0 TP7"]) == ["PP0 TP7", "PP1 TP0"]
    # printed order does not matter: the parallel dimensions do
    assert sorted_ranks(["TP0 DP1", "DP0 TP1"]) == ["DP0 TP1", "TP0 DP1"]
    assert sorted_ranks(["DP0 TP0 EP1", "DP0 TP0 EP0"]) == ["DP0 TP0 EP0", "DP0 TP0 EP1"]


def test_the_main_process_first_and_unknown_tokens_break_ties() -> None:
    assert rank_sort_key(None) < rank_sort_key("TP0")
    assert sorted_ranks(["TP0 ATTN_CP1", "TP0 ATTN_CP0"]) == ["TP0 ATTN_CP0", "TP0 ATTN_CP1"]


def test_every_view_uses_the_one_order() -> None:
    from cockpit.core.state import RunState

    st = RunState()
    for r in ("TP10", "TP2", "TP0"):
        st.rank(r)
    assert [r["rank"] for r in st.to_json()["ranks"]] == ["TP0", "TP2", "TP10"]
