"""The caption options (`--cue-*`) shared by the commands that write SRT or WebVTT.

Why: each limit of a subtitle cue (captions.CueRules) is one option, defined here once. A
command asks for them with a decorator and takes one parameter, `cue_rules: CueRules`, as
`commands/options.py` does for the model options:

    @app.command("file")
    @with_cue_options()
    def file_command(paths: ..., cue_rules: CueRules) -> None: ...

Each value is checked against its range (captions.*_RANGE) before any audio or model work:
a bad one is one line and exit 2.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer

from streamasr.backends.options import check_number
from streamasr.commands.common import cli_errors, spliced_parameters
from streamasr.errors import UsageError
from streamasr.text import captions
from streamasr.text.captions import CueRules

F = TypeVar("F", bound=Callable[..., Any])
_PARAM = "cue_rules"


@dataclass(frozen=True)
class _Spec:
    field: str
    flag: str
    type: type
    range: tuple[float, float]
    unit: str
    help: str


_SPECS = (
    _Spec("line_chars", "--cue-line-chars", int, captions.LINE_CHARS_RANGE, "characters",
          "Subtitle cues (srt, vtt): most characters on one line."),
    _Spec("lines", "--cue-lines", int, captions.LINES_RANGE, "lines",
          "Subtitle cues: most lines in one cue."),
    _Spec("max_s", "--cue-max-s", float, captions.MAX_CUE_S_RANGE, "s",
          "Subtitle cues: longest time one cue stays up."),
    _Spec("min_s", "--cue-min-s", float, captions.MIN_CUE_S_RANGE, "s",
          "Subtitle cues: shortest time one cue stays up (extended into the silence after it, "
          "never over the next cue)."),
    _Spec("max_cps", "--cue-max-cps", float, captions.MAX_CPS_RANGE, "characters/s",
          "Subtitle cues: fastest reading speed (met by extending into silence, then by "
          "merging cues; speech faster than that with no silence after it is counted)."),
    _Spec("min_words", "--cue-min-words", int, captions.MIN_WORDS_RANGE, "words",
          "Subtitle cues: fewest words in a cue where the utterance has that many (no orphans)."),
)


def cue_rules(**values: Any) -> CueRules:
    """The rules from the options' values, each checked against its range (UsageError)."""
    for spec in _SPECS:
        check_number(spec.flag, values[spec.field], *spec.range, spec.unit)
    rules = CueRules(**values)
    if rules.min_s > rules.max_s:
        raise UsageError(
            f"--cue-min-s {rules.min_s:g} is longer than --cue-max-s {rules.max_s:g}; "
            "a cue cannot be both"
        )
    return rules


def with_cue_options() -> Callable[[F], F]:
    """Add the `--cue-*` options where the command's `cue_rules` parameter stands."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        if _PARAM not in signature.parameters:
            raise TypeError(f"{command.__name__} needs a parameter named {_PARAM}")
        defaults = CueRules()
        group = [
            inspect.Parameter(
                f"cue_{spec.field}",
                inspect.Parameter.KEYWORD_ONLY,
                default=getattr(defaults, spec.field),
                annotation=Annotated[spec.type, typer.Option(spec.flag, help=spec.help)],
            )
            for spec in _SPECS
        ]
        params = spliced_parameters(signature, _PARAM, group)

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            values = {spec.field: kwargs.pop(f"cue_{spec.field}") for spec in _SPECS}
            with cli_errors():
                kwargs[_PARAM] = cue_rules(**values)
            return command(**kwargs)

        wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper  # type: ignore[return-value]

    return decorate
