"""Option values converted without pydantic (streamasr/commands/coerce.py) come out as
Typer's own pydantic converter makes them, and every value it does not take still gets
Typer's error message. Both converters are the real ones, side by side."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer import _coercion
from typer._click.exceptions import BadParameter
from typer.models import OptionInfo

import streamasr.cli  # noqa: F401 - installs the converter
from streamasr.commands import coerce

REPO = Path(__file__).resolve().parent.parent
WAV = REPO / "models" / "tiny-en" / "test_wavs" / "0.wav"
ANNOTATIONS = {"str": str, "int": int, "float": float, "bool": bool, "path": Path,
               "list-str": list[str]}


def typer_convert(annotation: Any, value: Any) -> tuple[str, Any]:
    """("ok", value) or ("error", message) from Typer's own (pydantic) converter."""
    descriptor = _coercion.resolve_type_descriptor(annotation, OptionInfo())
    try:
        return "ok", _coercion.build_runtime_param(descriptor)._coerce_value(
            value, param=None, ctx=None)
    except BadParameter as exc:
        return "error", exc.message


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("kind", sorted(ANNOTATIONS))
def test_every_plain_option_kind_is_recognised(kind: str) -> None:
    descriptor = _coercion.resolve_type_descriptor(ANNOTATIONS[kind], OptionInfo())
    assert coerce.plain_kind(descriptor) == kind


def test_options_with_a_range_or_parser_keep_typers_converter() -> None:
    for info in (OptionInfo(min=1), OptionInfo(max=3.0), OptionInfo(parser=int)):
        assert coerce.plain_kind(_coercion.resolve_type_descriptor(int, info)) is None


NUMBERS = ["0", "7", "-3", "+3", "007", "-0", "3.5", ".5", "5.", "1e3", "1E-3", "-2.5e+2",
           " 3", "3 ", "3_000", "3.0", "1e", "abc", "", "+", "-", ".", "inf", "nan", "0x10",
           "1" * 40, "0.1000000000000000055511151231257827"]


@pytest.mark.parametrize("kind", ["int", "float"])
@pytest.mark.parametrize("text", NUMBERS)
def test_numbers_come_out_as_typer_makes_them(kind: str, text: str) -> None:
    outcome, expected = typer_convert(ANNOTATIONS[kind], text)
    converted = coerce.convert(kind, text)
    if converted is not coerce._MISS:
        assert outcome == "ok" and same(converted, expected), (text, expected, converted)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789+-.eE_ ", max_size=12), st.sampled_from(["int", "float"]))
def test_any_number_spelling_agrees_with_typer(text: str, kind: str) -> None:
    converted = coerce.convert(kind, text)
    if converted is not coerce._MISS:
        outcome, expected = typer_convert(ANNOTATIONS[kind], text)
        assert outcome == "ok" and same(converted, expected), (text, expected, converted)


@pytest.mark.parametrize(("kind", "value"), [
    ("str", "hello"), ("str", ""), ("bool", True), ("bool", False), ("int", 5),
    ("float", 0.32), ("float", 2), ("path", "models/tiny-en"), ("path", ""), ("path", "-"),
    ("list-str", ("a", "b")), ("list-str", []),
])
def test_plain_values_and_defaults_come_out_as_typer_makes_them(kind: str, value: Any) -> None:
    outcome, expected = typer_convert(ANNOTATIONS[kind], value)
    converted = coerce.convert(kind, value)
    assert converted is not coerce._MISS
    if kind == "path":
        converted = Path(converted)
    assert outcome == "ok" and same(converted, expected)


def test_a_bad_value_gets_typers_own_message() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streamasr", "file", str(WAV), "--threads", "abc"],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    _, expected = typer_convert(int, "abc")
    assert done.returncode == 2
    assert f"Invalid value for '--threads': {expected}" in done.stderr


def test_a_spelling_left_to_typer_still_works() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streamasr", "file", str(WAV), "--block-ms", "3_20", "-q"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
