"""How to add an optional part of streamasr, said for pip and pipx installs alike.

Why: `pip install 'streamasr[serve]'` does nothing for streamasr installed with pipx, which
keeps it in a virtual environment of its own; there the packages are injected into that
environment. An extra's packages are read from the installed metadata, so the hint follows
pyproject.toml instead of repeating it.
"""

from __future__ import annotations

import re
import shlex

DISTRIBUTION = "streamasr"


def install_hint(extra: str | None = None, packages: tuple[str, ...] = ()) -> str:
    """The pip line for an extra (or for `packages`), then the pipx line that does the same:
    `pip install 'streamasr[serve]' (with pipx: pipx inject streamasr 'websockets>=14' ...)`."""
    if extra is not None:
        pip = f"pip install {shlex.quote(f'{DISTRIBUTION}[{extra}]')}"
        packages = packages or extra_requirements(extra)
    else:
        pip = f"pip install {_words(packages)}"
    if packages:
        pipx = f"pipx inject {DISTRIBUTION} {_words(packages)}"
    else:  # metadata not found (run from a source tree): reinstall with the extra
        pipx = f"pipx install --force {shlex.quote(f'{DISTRIBUTION}[{extra}]')}"
    return f"{pip} (with pipx: {pipx})"


def require(modules: tuple[str, ...], what: str, extra: str) -> None:
    """`what` needs `modules` (found, not imported): else a DependencyError naming the pip
    and pipx lines of `extra`."""
    import importlib.util

    from streamasr.errors import DependencyError

    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    if missing:
        raise DependencyError(f"{what} needs {' and '.join(missing)}: {install_hint(extra)}")


def extra_requirements(extra: str) -> tuple[str, ...]:
    """The requirements the installed streamasr declares for `extra` (markers dropped); none
    when its metadata is not there."""
    from importlib import metadata  # read only when a hint is printed

    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return ()
    marker = re.compile(r"""extra\s*==\s*["']""" + re.escape(extra) + r"""["']""")
    return tuple(
        requirement.split(";", 1)[0].strip()
        for requirement in declared
        if ";" in requirement and marker.search(requirement.split(";", 1)[1])
    )


def _words(packages: tuple[str, ...]) -> str:
    return " ".join(shlex.quote(package) for package in packages)
