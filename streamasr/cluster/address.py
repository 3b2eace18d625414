"""What `--ray` takes, checked before anything loads.

`--ray` alone means a cluster of this machine's cores started for the run; `--ray auto`
joins the cluster `ray start` set up on this host; `--ray ray://HOST:PORT` goes through a
Ray client server; `--ray HOST:PORT` joins a head node's GCS directly.

Typer options always take a value, so a bare `--ray` is rewritten to `--ray local` before
the command line is parsed (`expand_bare_ray`): the word after `--ray` is its value only when
it looks like an address, so `file --ray talk.wav` still reads talk.wav as an input.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from streamasr.errors import UsageError

LOCAL = "local"
AUTO = "auto"
_HOST_PORT = re.compile(r"^[A-Za-z0-9_.\-\[\]:]*[A-Za-z0-9\]]:(\d{1,5})$")


def looks_like_address(value: str) -> bool:
    """local, auto, ray://..., or HOST:PORT."""
    return value in (LOCAL, AUTO) or value.startswith("ray://") or bool(_HOST_PORT.match(value))


def check_address(value: str) -> str:
    """The address as Ray's `init` takes it ('local' stays for a cluster started here)."""
    if value.startswith("ray://"):
        rest = value[len("ray://"):]
        if not _HOST_PORT.match(rest):
            raise UsageError(
                f"--ray {value}: a Ray client address is ray://HOST:PORT (port 10001 by "
                "default), e.g. ray://head.example:10001"
            )
        return value
    if looks_like_address(value):
        match = _HOST_PORT.match(value)
        if match and not 0 < int(match.group(1)) < 65536:
            raise UsageError(f"--ray {value}: the port must be between 1 and 65535")
        return value
    raise UsageError(
        f"--ray {value!r} is not an address: give nothing (a cluster on this machine), "
        "auto (the cluster `ray start` runs here), ray://HOST:PORT or HOST:PORT"
    )


def expand_bare_ray(args: Sequence[str]) -> list[str]:
    """`--ray` with no address after it becomes `--ray local`; everything else is kept."""
    out: list[str] = []
    for index, arg in enumerate(args):
        out.append(arg)
        if arg == "--":
            out.extend(args[index + 1:])
            break
        if arg == "--ray":
            following = args[index + 1] if index + 1 < len(args) else None
            if following is None or not looks_like_address(following):
                out.append(LOCAL)
    return out
