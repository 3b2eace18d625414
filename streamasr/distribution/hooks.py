"""What the engines do to a model while it is installed, handed in by the layer above.

Why: the model store sits below the engines (they use its cache and downloads), so it must
not import them; the engine registry (`backends.registry.install_hooks`) builds these from
each engine entry and the commands pass them to `install.pull`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


def _nothing(_path: Path) -> None:
    return None


@dataclass(frozen=True)
class InstallHooks:
    """`check_file`: refuse a single-file model (a `.nemo`) before it enters the cache;
    `prepare_folder`: make an installed folder's first load quick (optimised graphs)."""

    check_file: Callable[[Path], None] = _nothing
    prepare_folder: Callable[[Path], None] = _nothing


NO_HOOKS = InstallHooks()  # the store alone (its own tests): no engine checks or preparation
