"""`-h` that fits an 80-column terminal: each option in two columns, not six.

Typer's rich help gives the long names, short names, negative names and the type a column
each, sized by the longest in the panel; at 80 columns that left ~23 characters for the
help. Here the names, the type and the negative form share one column (the negative form on
a line of its own), no wider than NAMES_MAX, so the help column keeps at least 40
characters at 80 columns. The options are grouped into panels by PANELS, so a command's
help reads by topic; an option no panel names stays under "Options".
"""

from __future__ import annotations

import inspect
from typing import Any

from typer import _click as click
from typer.core import TyperArgument, TyperOption

#: The names column's widest (a longer name wraps at its spaces).
NAMES_MAX = 30

#: Panel by option name, for every command; the order of first use is the panels' order.
PANELS: dict[str, tuple[str, ...]] = {
    "Model and engine": (
        "--model", "--backend", "--gpu", "--device", "--threads", "--att-context-size",
        "--decoder", "--trust-model-config", "--chunk", "--fp32", "--decoding-method",
        "--verify", "--hotwords", "--hotwords-score", "--engine-option",
    ),
    "Endpoints and feed": (
        "--endpoint", "--rule1", "--rule2", "--rule3", "--block-ms", "--tail-padding",
        "--onset-dbfs", "--vad", "--vad-end", "--vad-gate", "--vad-model",
    ),
    "Input": ("--realtime", "--raw", "--rate", "--channels"),
    "Output": (
        "--format", "--partials", "--output-dir", "--sentence-case", "--punctuate",
        "--quiet", "--verbose",
    ),
    "Subtitle cues": (
        "--cue-line-chars", "--cue-lines", "--cue-max-s", "--cue-min-s", "--cue-max-cps",
        "--cue-min-words",
    ),
    "Remote": ("--server", "--room", "--cafile", "--ray"),
    "Server": (
        "--host", "--port", "--workers", "--wyoming", "--schedule", "--max-batch",
        "--max-wait-ms", "--grace-s",
    ),
    "Limits": (
        "--max-connections", "--max-session-s", "--idle-timeout-s", "--handshake-timeout-s",
        "--max-frame-bytes", "--max-queued-audio-s", "--send-queue", "--max-upload-mb",
    ),
    "Security": ("--token-file", "--allow-origin", "--certfile", "--keyfile"),
    "Rooms": (
        "--rooms", "--max-rooms", "--max-viewers", "--max-readers", "--room-history",
        "--publish-token-file", "--view-token-file",
    ),
}  # fmt: skip
_PANEL_OF = {name: panel for panel, names in PANELS.items() for name in names}

#: A command's own panels, where they differ from PANELS (bench's --schedule is no server's).
COMMAND_PANELS: dict[str, dict[str, str]] = {
    "bench": {
        **dict.fromkeys(("--limit", "--audio-column", "--text-column", "--metric"), "Dataset"),
        **dict.fromkeys(
            ("--realtime", "--streams", "--workers", "--ray", "--capacity", "--probe-seconds",
             "--ceiling", "--schedule"),
            "Speed and capacity",
        ),
        **dict.fromkeys(("--out", "--baseline", "--fail-on", "--plot"), "Results"),
    },
    "latency": dict.fromkeys(
        ("--chunk", "--att-context-size", "--style", "--layers", "--subsampling",
         "--left-chunks", "--measure"),
        "Streaming setting",
    ),
    "mask": dict.fromkeys(
        ("--steps", "--style", "--left-chunks", "--layers", "--att-context-size", "--chunk"),
        "Mask",
    ),
    "mic": {
        "--compute-device": "Model and engine",
        **dict.fromkeys(
            ("--device", "--channel", "--duration", "--save", "--max-backlog"), "Capture"),
        "--log": "Output",
    },
}  # fmt: skip


def assign_panels(command: click.Command) -> None:
    """Put each of `command`'s options in its panel (one set in code is kept)."""
    own = COMMAND_PANELS.get(command.name or "", {})
    for param in command.params:
        if getattr(param, "rich_help_panel", None) is None:
            for name in param.opts:
                panel = own.get(name) or _PANEL_OF.get(name)
                if panel:
                    param.rich_help_panel = panel  # type: ignore[attr-defined]
                    break


def place_help(command: click.Command, ctx: click.Context) -> None:
    """-h, --help at the end of the last panel when every other option has a panel: an
    "Options" panel holding only -h costs three lines and says nothing."""
    helper = command.get_help_option(ctx)
    others = [p for p in command.get_params(ctx)
              if isinstance(p, TyperOption) and p is not helper and not p.hidden]  # fmt: skip
    panels = [getattr(p, "rich_help_panel", None) for p in others]
    if helper is not None and others and all(panels):
        helper.rich_help_panel = list(dict.fromkeys(panels))[-1]


def _names(param: Any, ctx: click.Context) -> Any:
    import typer.rich_utils as rich_utils
    from rich.text import Text

    if isinstance(param, TyperArgument):  # as the usage line names it: PATHS..., [NAME]
        return Text(param._usage_display_name(), style=rich_utils.STYLE_OPTION)
    names = [o for o in param.opts if not o.startswith("--")]  # -m, --model: GNU's order
    names += [o for o in param.opts if o.startswith("--")]
    text = Text(", ".join(n for n in names if n), style=rich_utils.STYLE_OPTION)
    shown = param.display_type_rich(ctx=ctx)
    if shown:
        text.append(f" {shown}", style=rich_utils.STYLE_TYPES)
    for negative in param.secondary_opts:
        text.append(f"\n{negative}", style=rich_utils.STYLE_NEGATIVE_OPTION)
    return text


def _print_options_panel(
    *, name: str, params: list[Any], ctx: click.Context, markup_mode: Any, console: Any
) -> None:
    import typer.rich_utils as rich_utils
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    if not params:
        return
    required = any(param.required for param in params)
    table = Table(highlight=True, show_header=False, expand=True, box=None,
                  pad_edge=False, padding=(0, 1))  # fmt: skip
    if required:
        table.add_column(width=1)
    table.add_column(max_width=NAMES_MAX, overflow="fold")
    table.add_column(ratio=1, overflow="fold")
    for param in params:
        row: list[Any] = [_names(param, ctx)]
        row.append(_help(param, ctx, markup_mode))
        if required:
            mark = rich_utils.REQUIRED_SHORT_STRING if param.required else ""
            row.insert(0, Text(mark, style=rich_utils.STYLE_REQUIRED_SHORT))
        table.add_row(*row)
    console.print(Panel(table, border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER, title=name,
                        title_align=rich_utils.ALIGN_OPTIONS_PANEL))  # fmt: skip


def _help(param: Any, ctx: click.Context, markup_mode: Any) -> Any:
    """The option's help with its default and `[required]` run on in the same lines."""
    import typer.rich_utils as rich_utils
    from rich.columns import Columns
    from rich.text import Text

    shown = rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode)
    if not isinstance(shown, Columns):
        return shown
    parts = [r for r in shown.renderables if isinstance(r, Text)]
    if len(parts) == len(shown.renderables):
        return Text(" ").join(parts)
    return shown


def reflow(text: str | None) -> str | None:
    """A command's help with each paragraph's source line breaks made spaces (Typer's rich
    help keeps them, so at 80 columns a line broke once at the terminal and once where the
    source did); a paragraph with an indented, bulleted or kept (\\b) line is left as it is."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    for i, paragraph in enumerate(paragraphs):
        lines = paragraph.splitlines()
        if not any(line[:1] in (" ", "-", "*", "\b") for line in lines):
            paragraphs[i] = " ".join(lines)
    return "\n\n".join(paragraphs)


def install() -> None:
    """Use the compact panels for every command's help."""
    import typer.rich_utils as rich_utils

    rich_utils._print_options_panel = _print_options_panel
