"""What the property tests (tests/test_fuzz_*.py) generate, and what they hold each parser to.

The property for every parser of outside input: it returns a correct result, or raises its
one error type with a message a person can read (one line, bounded, however large or
strange the input was): never another exception, a hang or unbounded memory.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context


def scratch(prefix: str) -> Path:
    """A folder of this process for the files the tests write (a long run writes thousands),
    removed when the process ends."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


#: An error message is a line, not a dump of the input.
MAX_MESSAGE_CHARS = 600

#: Numbers that break careless checks: huge integers (no float holds them), the float
#: edges, NaN and the infinities (Python's JSON reader takes them), bools (ints in Python).
EDGE_NUMBERS = st.sampled_from([
    0, -1, 1, 2**31, 2**53 + 1, 2**63, 2**64, 10**400, -(10**400), 0.5, -0.0, 1e308, 1e-320,
    float("nan"), float("inf"), float("-inf"), True, False,
])  # fmt: skip

SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats() | EDGE_NUMBERS
    | st.text(max_size=12)
)  # fmt: skip

#: Any JSON value Python's reader can give (NaN and Infinity included), nested a little.
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


#: Stands for "this key left out" among the values `mutated` sets.
LEFT_OUT = object()


def mutated(
    valid: st.SearchStrategy[dict[str, Any]], keys: Sequence[str], most: int = 2
) -> st.SearchStrategy[dict[str, Any]]:
    """Valid objects with up to `most` of `keys` set to any value or left out: every check
    of a parser is reached (wholly random objects fail the first one nearly always), and
    the objects left as they were show that valid input is read correctly."""
    changes = st.lists(st.tuples(st.sampled_from(list(keys)),
                                 JSON_VALUES | EDGE_NUMBERS | st.just(LEFT_OUT)),
                       max_size=most)  # fmt: skip

    def apply(item: tuple[dict[str, Any], list[tuple[str, Any]]]) -> dict[str, Any]:
        data, edits = dict(item[0]), item[1]
        for key, value in edits:
            if value is LEFT_OUT:
                data.pop(key, None)
            else:
                data[key] = value
        return data

    return st.tuples(valid, changes).map(apply)


def json_text(value: Any) -> str:
    """`value` as JSON text as a hostile client may send it (NaN, Infinity, any unicode)."""
    return json.dumps(value, ensure_ascii=False)


#: Text that is not quite JSON: truncated, deeply nested, stray bytes, plain words.
BROKEN_JSON = st.one_of(
    st.integers(1, 60_000).map(lambda depth: "[" * depth),
    st.integers(1, 60_000).map(lambda depth: '{"a":' * depth),
    st.text(max_size=40),
    JSON_VALUES.map(json_text).flatmap(
        lambda text: st.integers(0, len(text)).map(lambda n: text[:n])  # cut short
    ),
)


def assert_clear(error: BaseException | str) -> None:
    """One clear line: not empty, no traceback, bounded whatever the input's size. (Counted
    as a refusal in the run's statistics: --hypothesis-show-statistics.)"""
    _count("refused")
    message = str(error)
    assert message.strip(), f"{type(error).__name__} without a message"
    assert "\n" not in message.strip(), f"a message of several lines: {message[:200]}"
    assert len(message) <= MAX_MESSAGE_CHARS, f"a {len(message)}-character message: {message[:200]}"
    assert "Traceback" not in message


def accepted() -> None:
    """Counts an input the parser took (the statistics say how many reached the checks of a
    correct result)."""
    _count("accepted")


def _count(label: str) -> None:
    if currently_in_test_context():  # helpers are also used by plain tests
        event(label)
