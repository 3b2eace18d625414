"""Attention masks: hand-checked matrices for NeMo's rules, validation, depth, and the CLI.

NeMo is not installed here, so the expected matrices are written out by hand from its rules
(chunked_limited: chunk_size = R + 1, left_chunks = L // chunk_size, visible when
0 <= chunk(query) - chunk(key) <= left_chunks; regular: a band of L left and R right;
-1 = unlimited). Rows are queries, columns keys, 1 = may attend.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from streamasr.analysis.mask import (
    MAX_LAYERS,
    MAX_STEPS,
    UNLIMITED,
    build_mask_report,
    check_mask_numbers,
    chunk_mask,
    chunked_limited_mask,
    history_steps,
    lookahead_steps,
    parse_att_context_size,
    receptive_field,
    regular_mask,
    validate_att_context_size,
)
from streamasr.commands.latency import register
from streamasr.errors import UsageError


def matrix(text: str) -> np.ndarray:
    """Rows of 0/1 characters (spaces ignored) into a boolean matrix."""
    rows = [line.replace(" ", "") for line in text.strip().splitlines()]
    return np.array([[c == "1" for c in row] for row in rows], dtype=bool)


# chunked_limited [6, 2]: chunks of 3, each sees itself and 2 earlier chunks.
CHUNKED_6_2 = matrix("""
    111 000 000 000
    111 000 000 000
    111 000 000 000
    111 111 000 000
    111 111 000 000
    111 111 000 000
    111 111 111 000
    111 111 111 000
    111 111 111 000
    000 111 111 111
    000 111 111 111
    000 111 111 111
""")

# chunked_limited [2, 1]: chunks of 2, one earlier chunk.
CHUNKED_2_1 = matrix("""
    11 00 00
    11 00 00
    11 11 00
    11 11 00
    00 11 11
    00 11 11
""")

# chunked_limited [-1, 2]: chunks of 3, every earlier chunk (unlimited left).
CHUNKED_UNLIMITED_2 = matrix("""
    111 000 0
    111 000 0
    111 000 0
    111 111 0
    111 111 0
    111 111 0
    111 111 1
""")

# chunked_limited [0, 1]: chunks of 2, no history at all.
CHUNKED_0_1 = matrix("""
    11 00 0
    11 00 0
    00 11 0
    00 11 0
    00 00 1
""")

# regular [2, 1]: band, 2 left and 1 right.
REGULAR_2_1 = matrix("""
    110000
    111000
    111100
    011110
    001111
    000111
""")

# regular [-1, 1]: unlimited left, 1 right.
REGULAR_UNLIMITED_1 = matrix("""
    11000
    11100
    11110
    11111
    11111
""")

# regular [1, -1]: 1 left, unlimited right.
REGULAR_1_UNLIMITED = matrix("""
    11111
    11111
    01111
    00111
    00011
""")

# WeNet/icefall chunk 4, 1 left chunk, 12 steps.
WENET_4_1 = matrix("""
    1111 0000 0000
    1111 0000 0000
    1111 0000 0000
    1111 0000 0000
    1111 1111 0000
    1111 1111 0000
    1111 1111 0000
    1111 1111 0000
    0000 1111 1111
    0000 1111 1111
    0000 1111 1111
    0000 1111 1111
""")


@pytest.mark.parametrize(
    ("steps", "left", "right", "expected"),
    [
        (12, 6, 2, CHUNKED_6_2),
        (6, 2, 1, CHUNKED_2_1),
        (7, -1, 2, CHUNKED_UNLIMITED_2),
        (5, 0, 1, CHUNKED_0_1),
    ],
)
def test_chunked_limited_matches_hand_checked(steps, left, right, expected):
    np.testing.assert_array_equal(chunked_limited_mask(steps, left, right), expected)


@pytest.mark.parametrize(
    ("steps", "left", "right", "expected"),
    [(6, 2, 1, REGULAR_2_1), (5, -1, 1, REGULAR_UNLIMITED_1), (5, 1, -1, REGULAR_1_UNLIMITED)],
)
def test_regular_band_matches_hand_checked(steps, left, right, expected):
    np.testing.assert_array_equal(regular_mask(steps, left, right), expected)


def test_wenet_chunks_match_hand_checked_and_nemo_equivalent():
    np.testing.assert_array_equal(chunk_mask(12, 4, 1), WENET_4_1)
    # chunk 4 with 1 left chunk is att_context_size [4, 3] in NeMo's terms
    np.testing.assert_array_equal(chunk_mask(12, 4, 1), chunked_limited_mask(12, 4, 3))
    np.testing.assert_array_equal(chunk_mask(9, 3, -1), chunked_limited_mask(9, -1, 2))


def test_chunk_of_one_step_is_a_causal_band():
    # R = 0: chunks of one step, so chunked_limited [3, 0] is the band [3, 0]
    np.testing.assert_array_equal(chunked_limited_mask(10, 3, 0), regular_mask(10, 3, 0))


def test_every_step_sees_itself():
    for m in (CHUNKED_6_2, REGULAR_2_1, chunked_limited_mask(20, -1, 4), chunk_mask(9, 2, 0)):
        assert m.diagonal().all()


def test_left_context_must_be_a_multiple_of_the_chunk():
    with pytest.raises(UsageError, match=r"multiple of the chunk size .* = 5") as err:
        validate_att_context_size(6, 4, "chunked_limited")
    assert "[5, 4]" in str(err.value) and "[10, 4]" in str(err.value)
    with pytest.raises(UsageError, match="multiple"):
        chunked_limited_mask(12, 70, 12)
    # the shipped settings, zero and unlimited left context are accepted
    for left, right in ((70, 13), (70, 0), (0, 3), (-1, 5)):
        validate_att_context_size(left, right, "chunked_limited")
    # the band style has no chunks, so any left context is fine
    validate_att_context_size(7, 2, "regular")


def test_unlimited_right_context_is_not_a_chunk():
    with pytest.raises(UsageError, match="--style regular"):
        validate_att_context_size(70, -1, "chunked_limited")


@pytest.mark.parametrize(("left", "right"), [(-2, 1), (4, -3)])
def test_negative_context_other_than_unlimited_is_refused(left, right):
    with pytest.raises(UsageError, match="-1 for unlimited"):
        validate_att_context_size(left, right, "regular")


def test_parse_att_context_size_forms():
    assert parse_att_context_size("70,13") == (70, 13)
    assert parse_att_context_size("[70, 13]") == (70, 13)
    assert parse_att_context_size("-1,2") == (-1, 2)
    for bad in ("70", "70,13,1", "a,b", ""):
        with pytest.raises(UsageError, match="LEFT,RIGHT"):
            parse_att_context_size(bad)


def test_band_lookahead_grows_with_depth():
    band = regular_mask(12, 6, 2)
    assert max(lookahead_steps(band)) == 2
    for layers in (2, 3, 4):
        assert max(lookahead_steps(receptive_field(band, layers))) == 2 * layers


def test_chunk_aware_lookahead_stays_bounded_with_depth():
    chunked = chunked_limited_mask(12, 6, 2)
    per_row = lookahead_steps(chunked)
    assert per_row == (2, 1, 0) * 4
    for layers in (2, 3, 8):
        deep = receptive_field(chunked, layers)
        assert lookahead_steps(deep) == per_row
        # history does grow: chunk 3 reaches chunk 0 through a second layer
        assert deep[9, 0] and not chunked[9, 0]


def test_receptive_field_of_one_layer_is_the_mask():
    np.testing.assert_array_equal(receptive_field(CHUNKED_6_2, 1), CHUNKED_6_2)
    with pytest.raises(UsageError):
        receptive_field(CHUNKED_6_2, 0)


def test_depth_is_bounded_and_stops_at_the_fixed_point():
    band = regular_mask(40, 6, 2)
    # a band of +2 per layer covers 40 steps within 20 layers; deeper reaches nothing new
    full = receptive_field(band, 20)
    assert full.all()
    np.testing.assert_array_equal(receptive_field(band, MAX_LAYERS), full)
    with pytest.raises(UsageError, match=f"--layers {MAX_LAYERS + 1}: use 1 to {MAX_LAYERS}"):
        receptive_field(band, MAX_LAYERS + 1)
    with pytest.raises(UsageError, match="--layers 100000000"):
        check_mask_numbers(12, None, UNLIMITED, 100_000_000)
    with pytest.raises(UsageError, match=f"--steps {MAX_STEPS + 1}"):
        check_mask_numbers(MAX_STEPS + 1, None, UNLIMITED, 1)
    with pytest.raises(UsageError, match="--left-chunks"):
        check_mask_numbers(12, 2, 10**9, 1)
    check_mask_numbers(MAX_STEPS, MAX_STEPS, UNLIMITED, MAX_LAYERS)  # the limits themselves pass


def test_history_steps_per_row():
    assert history_steps(REGULAR_2_1) == (0, 1, 2, 2, 2, 2)
    assert history_steps(CHUNKED_2_1) == (0, 1, 2, 3, 2, 3)


def test_report_needs_exactly_one_way_to_define_the_mask():
    with pytest.raises(UsageError, match="either"):
        build_mask_report(12)
    with pytest.raises(UsageError, match="either"):
        build_mask_report(12, att_context_size=(6, 2), chunk=4)
    with pytest.raises(UsageError, match="--style regular needs"):
        build_mask_report(12, chunk=4, style="regular")


def test_report_json_round_trip():
    report = build_mask_report(12, att_context_size=(6, 2), layers=3)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["chunk_size"] == 3 and data["left_chunks"] == 2
    assert data["att_context_size"] == [6, 2]
    np.testing.assert_array_equal(np.array(data["mask"]), CHUNKED_6_2)
    assert data["receptive_field_lookahead_steps"] == [2, 1, 0] * 4


# --- the command ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def run(cli: typer.Typer, *args: str):
    return CliRunner().invoke(cli, ["mask", *args])


def test_mask_json_is_the_boolean_matrix(cli):
    result = run(cli, "--steps", "12", "--att-context-size", "6,2", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    np.testing.assert_array_equal(np.array(data["mask"]), CHUNKED_6_2)
    assert "receptive_field" not in data


def test_mask_json_regular_and_wenet(cli):
    result = run(cli, "--steps", "6", "--att-context-size", "2,1", "--style", "regular",
                 "-f", "json")
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(np.array(json.loads(result.stdout)["mask"]), REGULAR_2_1)
    result = run(cli, "--steps", "12", "--chunk", "4", "--left-chunks", "1", "-f", "json")
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(np.array(json.loads(result.stdout)["mask"]), WENET_4_1)


def test_mask_table_draws_rows_boundaries_and_depth(cli):
    result = run(cli, "--steps", "12", "--att-context-size", "6,2", "--layers", "3")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "chunk_size = R + 1 = 3, left_chunks = 2" in out
    rows = [line for line in out.splitlines() if line[:3].strip().isdigit()]
    assert len(rows) == 12
    assert rows[0].count("│") == 3  # boundaries before steps 3, 6 and 9
    assert "▒" in rows[9] and "▒" not in rows[0]  # reached only through depth
    assert "look-ahead stays at 2 steps through 3 layers" in out


def test_mask_table_band_says_lookahead_grows(cli):
    result = run(cli, "--steps", "12", "--att-context-size", "6,2", "--style", "regular",
                 "--layers", "3")
    assert result.exit_code == 0, result.output
    assert "look-ahead grows with depth: 2 → 6 steps over 3 layers" in result.stdout
    assert "│" not in result.stdout  # a band has no chunk boundaries


def test_mask_invalid_context_is_a_usage_error(cli):
    result = run(cli, "--steps", "12", "--att-context-size", "6,3")
    assert result.exit_code == 2
    assert "multiple of the chunk size" in result.stderr
    assert result.stdout == ""
