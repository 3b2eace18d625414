"""Option values of plain types converted without pydantic.

Why: Typer (0.29) converts every option value through a pydantic TypeAdapter, so any command
line imports pydantic, pydantic-core and what they pull in (email, zoneinfo, importlib's
metadata, ...): about 6 MB of resident memory that a `streamasr file` run pays beside the
model for nothing, since every option here is a str, int, float, bool, Path or list of str.
`install()` gives such options a converter that accepts the plain spellings of these types
("16", "-3", "0.5", "1e-3", a path) and returns what pydantic would return for them; anything
else (" 16", "3_000", "abc", a value out of range) goes to Typer's own pydantic converter, so
every error message stays Typer's word for word. Options with a parser, a range or another
type keep Typer's converter from the start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

#: The spellings converted here; pydantic agrees on all of them (tests/test_coerce.py).
_INT = re.compile(r"[+-]?[0-9]{1,30}")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_MISS = object()
_plain_class: Any = None  # the converter class, once install() made it


def install() -> None:
    """Route plain options of Typer's parameters through the converter here (once; a Typer
    without pydantic conversion is left as it is)."""
    global _plain_class
    try:
        from typer import _coercion
        from typer.core import _TyperParameter
    except ImportError:  # an older Typer: click's own types, no pydantic
        return
    original = getattr(_TyperParameter, "get_runtime_param", None)
    if original is None or _plain_class is not None:
        return

    try:  # a Typer whose RuntimeParam changed shape keeps its own converter
        @dataclass(frozen=True)
        class PlainRuntimeParam(_coercion.RuntimeParam):
            """A plain value converted here; anything else by Typer's converter (built on the
            first value that needs it)."""

            kind: str
            descriptor: Any

            @cached_property
            def typer_param(self) -> Any:
                return _coercion.build_runtime_param(self.descriptor)

            def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
                converted = convert(self.kind, value)
                if converted is _MISS:
                    return self.typer_param._coerce_value(value, param=param, ctx=ctx)
                if self.kind == "path":
                    from typer._param_types import coerce_cli_path

                    return coerce_cli_path(
                        converted, self.parameter_info, path_type=Path, param=param, ctx=ctx
                    )
                return converted
    except (AttributeError, TypeError):
        return

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            descriptor = self.type_descriptor
            try:
                kind = plain_kind(descriptor)
                plain = None if kind is None else PlainRuntimeParam(
                    parameter_info=descriptor.parameter_info,
                    annotation=descriptor.annotation, kind=kind, descriptor=descriptor,
                )  # fmt: skip
            except (AttributeError, TypeError):  # a Typer whose internals moved: its own way
                plain = None
            self._runtime_param = (
                plain if plain is not None else _coercion.build_runtime_param(descriptor)
            )
        return self._runtime_param

    _plain_class = PlainRuntimeParam
    _TyperParameter.get_runtime_param = get_runtime_param  # type: ignore[method-assign]


def plain_kind(descriptor: Any) -> str | None:
    """"str", "int", "float", "bool", "path" or "list-str" for an option converted here; None for
    one Typer converts (a parser, a click type, a range, a file, any other annotation)."""
    info = descriptor.parameter_info
    if info.parser is not None or getattr(info, "click_type", None) is not None:
        return None
    if info.min is not None or info.max is not None or info.clamp:
        return None
    if descriptor.file_annotation is not None:
        return None
    annotation = descriptor.annotation
    if annotation is Path:  # a path_type other than Path is Typer's (it may keep a str)
        return "path" if getattr(info, "path_type", None) is None else None
    if annotation == list[str]:
        return "list-str"
    for plain, kind in ((str, "str"), (int, "int"), (float, "float"), (bool, "bool")):
        if annotation is plain:
            return kind
    return None


def convert(kind: str, value: Any) -> Any:
    """`value` as pydantic converts it for this kind of option; _MISS for a value whose
    conversion (or error message) is left to pydantic."""
    if kind == "str":
        return value if isinstance(value, str) else _MISS
    if kind == "bool":
        return value if isinstance(value, bool) else _MISS
    if kind == "int":
        if type(value) is int:
            return value
        if isinstance(value, str) and _INT.fullmatch(value):
            return int(value)
        return _MISS
    if kind == "float":
        if type(value) is float:
            return value
        if type(value) is int:
            return float(value)
        if isinstance(value, str) and len(value) <= 100 and _FLOAT.fullmatch(value):
            return float(value)
        return _MISS
    if kind == "path":
        if isinstance(value, Path):
            return value
        return Path(value) if isinstance(value, str) else _MISS
    if kind == "list-str":
        if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
            return list(value)
        return _MISS
    return _MISS
