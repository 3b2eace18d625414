"""Prefix snapshots behave as the tuples of their items, and never change once handed out.

A hypothesis' tokens are snapshots of a list appended to in place (streamasr.text.prefix); every
consumer (renderers, JSONL, finals, other processes) must see what a tuple would give it.
"""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamasr.session.events import Partial
from streamasr.text.prefix import Growing, Prefix
from streamasr.text.tokens import shared_prefix_len

WORDS = st.lists(st.sampled_from(["▁A", "B", "▁C", "<0xE4>", ""]), max_size=6)
# an operation: ("extend", items) or ("replace", keep, items), keep taken modulo the length
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("extend"), WORDS),
        st.tuples(st.just("replace"), st.integers(0, 40), WORDS),
    ),
    max_size=30,
)


@given(OPS)
def test_snapshots_never_change_and_match_a_tuple(ops: list) -> None:
    growing: Growing[str] = Growing()
    model: tuple[str, ...] = ()
    taken = [(growing.snapshot(), model)]
    for op in ops:
        if op[0] == "extend":
            snapshot = growing.extend(op[1])
            model = model + tuple(op[1])
        else:
            keep = op[1] % (len(model) + 1)
            snapshot = growing.replace(keep, op[2])
            model = model[:keep] + tuple(op[2])
        taken.append((snapshot, model))
    for snapshot, held in taken:
        assert snapshot == held and held == snapshot
        assert tuple(snapshot) == held and list(snapshot) == list(held)
        assert len(snapshot) == len(held) and hash(snapshot) == hash(held)
        assert snapshot[1:3] == held[1:3] and snapshot[::-2] == held[::-2]
        assert pickle.loads(pickle.dumps(snapshot)) == held
    for (a, held_a), (b, held_b) in zip(taken, taken[1:], strict=False):
        assert shared_prefix_len(a, b, False) == shared_prefix_len(held_a, held_b, False)


def test_indexing_and_repr_follow_tuples() -> None:
    growing: Growing[str] = Growing()
    first = growing.extend(["x", "y"])
    growing.extend(["z"])
    assert first[-1] == "y" and first[0] == "x" and repr(first) == repr(("x", "y"))
    with pytest.raises(IndexError):
        first[2]  # appended after the snapshot: not part of it
    with pytest.raises(IndexError):
        first[-3]
    assert first != ("x", "y", "z") and first != "xy"
    with pytest.raises(ValueError, match="prefix of 3 items"):
        Prefix(["a"], 3)


def test_pickles_as_a_plain_tuple() -> None:
    """What crosses a process boundary (worker queues, Ray) is an ordinary tuple."""
    snapshot = Growing[float]().extend([0.04, 0.08])
    back = pickle.loads(pickle.dumps(snapshot))
    assert type(back) is tuple and back == (0.04, 0.08)


def test_partial_holding_snapshots_writes_the_same_json_as_tuples() -> None:
    tokens, times = Growing[str](), Growing[float]()
    snap = Partial(
        seq=1, audio_s=1.0, wall_s=0.1, segment=0, text="AB",
        tokens=tokens.extend(["▁A", "B"]), token_times_s=times.extend([0.2, 0.4]),
    )  # fmt: skip
    plain = Partial(
        seq=1, audio_s=1.0, wall_s=0.1, segment=0, text="AB",
        tokens=("▁A", "B"), token_times_s=(0.2, 0.4),
    )  # fmt: skip
    assert json.dumps(snap.to_dict()) == json.dumps(plain.to_dict())
    assert snap == plain and hash(snap) == hash(plain)
