"""Options a backend declares for itself: for each, one parser, one default and one range.

Why: `file`, `mic`, `bench`, `latency` and the library face (`streamasr.open_model`) must agree
on which engine takes which setting and what values it may have. An engine lists its options
on its `BackendEntry`; the commands build their command-line options from those lists, and
`engine_options()` in registry.py turns what was given into an `EngineOptions` through the
chosen backend's own parsers, refusing what that backend does not declare. Nothing outside an
engine's package names one of its options.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamasr.errors import UsageError


def check_number(
    option: str,
    value: float | None,
    low: float,
    high: float,
    unit: str = "",
    *,
    low_open: bool = False,
) -> None:
    """Refuse NaN, infinities and values outside [low, high] (or (low, high]), naming both."""
    if value is None:
        return
    inside = math.isfinite(value) and (value > low if low_open else value >= low) and value <= high
    if not inside:
        lower = "more than" if low_open else "from"
        span = f"{lower} {_shown(low)} to {_shown(high)}" + (f" {unit}" if unit else "")
        raise UsageError(f"{option} {_shown(value)}: use a number {span}")


def _shown(number: float) -> str:
    return str(number) if isinstance(number, int) else f"{number:g}"


@dataclass(frozen=True)
class Setting:
    """One field of a settings object as the command line takes it: the flag, its help and
    its range. A settings object (ServerLimits, RoomOptions, Security, CueRules) declares its
    own beside its fields, and a command splices them in (commands/common.py's
    `with_settings`), showing the object's own default. `type`: the option's Python type
    where the default's is not it (None, a file named for a value read from it)."""

    field: str
    flag: str
    help: str
    range: tuple[float, float] | None = None
    unit: str = ""
    type: Any = None

    def check(self, value: float | None) -> None:
        """Refuse a value outside the range, naming the flag (UsageError)."""
        if self.range is not None:
            check_number(self.flag, value, *self.range, self.unit)


@dataclass(frozen=True)
class EngineOption:
    """One setting of one engine, as the command line and the library take it.

    `parse` turns what was given (the text typed, or a Python value from a library caller)
    into the value the engine reads, range-checked, or raises UsageError naming `flag`.
    `switch`: a flag without a value (`--fp32`); given means True.
    `sweep`: the separator between values when bench sweeps this option ("," or "/");
    empty: bench cannot sweep it. `label` names a swept setting in bench's tables ("chunk 16");
`record` is the run record's key listing each setting's value ("chunks").
    `kind`: what the setting is about in words other engines share ("latency", "search",
    "head", "precision", "trust"); an engine given another's option of a kind it has names
    its own as the equivalent. `about` finishes the sentence "--FLAG ..." when another engine
    is given this option ("selects a sherpa-onnx export"); `example` follows the flag when it
    is named as the equivalent.
    """

    name: str
    help: str
    parse: Callable[[Any], Any]
    default: Any = None
    switch: bool = False
    sweep: str = ""
    label: str = ""
    record: str = ""
    kind: str = ""
    about: str = ""
    example: str = ""
    metavar: str = ""

    @property
    def flag(self) -> str:
        """The option on the command line: `att_context_size` -> `--att-context-size`."""
        return "--" + self.name.replace("_", "-")

    def value(self, given: Any) -> Any:
        """The engine's value for what was given (the default for None or an unset switch)."""
        if given is None or (self.switch and given is False):
            return self.default
        return self.parse(given)

    def sweep_values(self, text: str) -> list[Any]:
        """`16,32` (or `70,1/70,13`) as parsed values, each checked, none twice."""
        values: list[Any] = []
        for part in text.split(self.sweep):
            value = self.parse(part.strip())
            if value in values:
                raise UsageError(f"{self.flag} lists {part.strip()} twice")
            values.append(value)
        return values


def complete(declared: Iterable[EngineOption], values: Mapping[str, Any]) -> dict[str, Any]:
    """Every declared option's value: what `values` holds, else its default."""
    return {option.name: values.get(option.name, option.default) for option in declared}


def _ranged(
    flag: str, low: float, high: float, unit: str, kind: Callable[[str], Any], what: str
) -> Callable[[Any], Any]:
    """A parser for a `kind` (int, float) in [low, high], from its text or its value (a
    switch's True/False is not a number: its text does not parse)."""

    def parse(given: Any) -> Any:
        try:
            value = kind(str(given).strip())
        except ValueError:
            raise UsageError(f"{flag} takes {what}, got {given!r}") from None
        check_number(flag, value, low, high, unit)
        return value

    return parse


def whole_number(flag: str, low: int, high: int, unit: str = "") -> Callable[[Any], int]:
    """A parser for a whole number in [low, high]."""
    return _ranged(flag, low, high, unit, int, "a whole number")


def real_number(flag: str, low: float, high: float, unit: str = "") -> Callable[[Any], float]:
    """A parser for a finite number in [low, high]."""
    return _ranged(flag, low, high, unit, float, "a number")


def one_of(flag: str, choices: Sequence[str]) -> Callable[[Any], str]:
    """A parser for one of a few words."""

    def parse(given: Any) -> str:
        text = str(given).strip()
        if text not in choices:
            raise UsageError(f"{flag} {text!r}: use one of: {', '.join(choices)}")
        return text

    return parse


def text(given: Any) -> str:
    """A parser for free text (a file name): kept as given."""
    return str(given)


def switch(given: Any) -> bool:
    """A parser for a switch: True, or the words a config or a library caller may use."""
    if isinstance(given, bool):
        return given
    word = str(given).strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"a switch takes true or false, got {given!r}")
