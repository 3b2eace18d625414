"""A missing optional package is said with the line that installs it, for pip and for pipx
(which keeps streamasr in a virtual environment of its own, where `pip install` does nothing).

The hint is read from a real process in which the package cannot be imported, as on a
machine without it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from streamasr.extras import extra_requirements, install_hint

ROOT = Path(__file__).resolve().parents[1]


def without(modules: tuple[str, ...], *args: str) -> subprocess.CompletedProcess:
    """`streamasr ARGS` in a fresh process where `modules` cannot be imported."""
    hide = "; ".join(f"sys.modules[{name!r}] = None" for name in modules)
    code = f"import sys; {hide}; sys.argv[0] = 'streamasr'; from streamasr.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
        timeout=120, stdin=subprocess.DEVNULL,
    )


def test_serve_without_websockets_names_the_pip_and_the_pipx_line() -> None:
    done = without(("websockets",), "serve", "--port", "0")
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "streamasr serve needs websockets: pip install 'streamasr[serve]'" in lines[0]
    assert "with pipx: pipx inject streamasr 'websockets>=" in lines[0]


def test_the_pipx_line_injects_what_the_extra_declares() -> None:
    # the packages come from the installed metadata, i.e. from pyproject.toml's extras
    assert [name.split(">")[0] for name in extra_requirements("serve")] == [
        "websockets", "prometheus-client", "onnx", "fastapi", "uvicorn", "httptools",
        "sse-starlette", "python-multipart", "wyoming", "redis", "uvloop",
    ]
    assert install_hint(packages=("sounddevice",)) == (
        "pip install sounddevice (with pipx: pipx inject streamasr sounddevice)"
    )
    # an extra the metadata does not know is installed again with it
    assert install_hint("no-such-extra").endswith(
        "(with pipx: pipx install --force 'streamasr[no-such-extra]')"
    )
