"""The bundled random test models are byte-for-byte what the script makes.

Why: models/README.md promises that ``scripts/make_test_models.py`` regenerates the
committed files exactly; this checks it. It needs the optional PyPI ``zipformer``
package (installed with ``--no-deps`` by scripts/test.sh, see models/README.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
SUBDIRS = ("tiny-random-transducer", "tiny-random-ctc")
# one model per token type, made by scripts/make_token_models.py
TOKEN_SUBDIRS = (
    "tiny-random-cjkchar",
    "tiny-random-cjkchar-bpe",
    "tiny-random-bpe",
    "tiny-random-byte",
)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_make_test_models_reproduces_committed_files(tmp_path: Path) -> None:
    # find_spec, not importorskip: importing the package needs scripts/zf_compat.py first.
    if importlib.util.find_spec("zipformer") is None:
        pytest.fail("the zipformer package is missing: run scripts/test.sh (see models/README.md)")
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_test_models.py"), "--out-dir", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    for sub in SUBDIRS:
        committed = sorted(p.name for p in (MODELS / sub).iterdir())
        made = sorted(p.name for p in (tmp_path / sub).iterdir())
        assert made == committed
        for name in committed:
            assert _sha256(tmp_path / sub / name) == _sha256(MODELS / sub / name), f"{sub}/{name}"


def test_make_token_models_reproduces_committed_files(tmp_path: Path) -> None:
    if importlib.util.find_spec("zipformer") is None:
        pytest.fail("the zipformer package is missing: run scripts/test.sh (see models/README.md)")
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_token_models.py"), "--out-dir", tmp_path],
        check=True,
        capture_output=True,
        timeout=600,
    )
    for sub in TOKEN_SUBDIRS:
        committed = sorted(p.name for p in (MODELS / sub).iterdir())
        assert sorted(p.name for p in (tmp_path / sub).iterdir()) == committed
        for name in committed:
            assert _sha256(tmp_path / sub / name) == _sha256(MODELS / sub / name), f"{sub}/{name}"


def test_readme_lists_the_committed_checksums() -> None:
    readme = (MODELS / "README.md").read_text(encoding="utf-8")
    for sub in SUBDIRS + TOKEN_SUBDIRS:
        for path in sorted((MODELS / sub).iterdir()):
            assert f"{_sha256(path)}  {sub}/{path.name}" in readme
