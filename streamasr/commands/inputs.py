"""What `file` checks of its inputs before any model loads, for a local run and a Ray run
alike: that some input can be read at all, and the layout of headerless (raw) input."""

from __future__ import annotations

from streamasr.audio import STDIN_NAME, RawFormat, check_path, check_raw_format
from streamasr.errors import InputError, UsageError


def check_inputs_exist(paths: list[str]) -> None:
    """When no input can be read at all, say so before the model loads (seconds); when some
    can, the others fail one by one as they come, and the rest still run."""
    problems = []
    for path in paths:
        if path == STDIN_NAME:
            return
        try:
            check_path(path)
            return
        except InputError as exc:
            problems.append(exc)
        except OSError:  # a name the system cannot even look up: it fails alone, in order
            return
    if problems:
        more = len(problems) - 1
        raise InputError(f"{problems[0]}" + (f" (and {more} more unreadable)" if more else ""))


def raw_input_format(raw: str | None, rate: int | None, channels: int | None) -> RawFormat | None:
    """--raw/--rate/--channels as one checked format (None: inputs carry their own header)."""
    if raw is None:
        if rate is not None or channels is not None:
            raise UsageError(
                "--rate and --channels describe headerless PCM; add --raw s16le|s32le|f32le "
                "(audio files carry their own rate and channels)"
            )
        return None
    check_raw_format(RawFormat(raw, 16000, 1))  # the encoding first: it is the likelier typo
    if rate is None:
        raise UsageError(f"--raw {raw} needs --rate: headerless PCM does not say its rate")
    return check_raw_format(RawFormat(raw, rate, 1 if channels is None else channels))
