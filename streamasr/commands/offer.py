"""Whether to offer a download before a model loads, decided without the download stack.

Every run that loads a model asks this; only a catalog model that is not pulled yet, on a
terminal, needs `commands/models.py` (progress bars, the installer, HTTP), so that module is
imported only then.
"""

from __future__ import annotations

import sys


def offer_download(model: str | None) -> None:
    """A catalog model that is not pulled yet: on a terminal, ask, then pull it (see
    commands/models.py offer_download); any other model: nothing to do, nothing imported."""
    if model is None:
        return
    from streamasr.distribution.catalog import find

    if find(model) is None:
        return
    from streamasr.distribution.cache import find_cached

    if find_cached(model) is not None or not sys.stdin.isatty():
        return
    from streamasr.commands.models import offer_download as ask_and_pull

    ask_and_pull(model)
