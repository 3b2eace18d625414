"""What a model folder on this machine is (bundled, or pulled under a custom name).

Why: `models list` shows every model a command can run, not only catalog entries; for a folder
the catalog knows nothing about, the facts come from the files themselves (the ONNX
metadata, tokens.txt), read without loading any weights.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

UNKNOWN = "?"


@dataclass(frozen=True)
class FolderFacts:
    """Engine, model kind, token type and exported chunks of a local model folder."""

    engine: str = UNKNOWN
    kind: str = UNKNOWN
    token_type: str = UNKNOWN
    chunks: tuple[int, ...] = ()

    @property
    def chunk_label(self) -> str:
        return chunk_label(self.chunks)


def chunk_label(chunks: tuple[int, ...]) -> str:
    """'320 ms' or '320/640 ms' (chunks are 50 Hz frames); '-' when none are known."""
    return "/".join(str(c * 20) for c in chunks) + " ms" if chunks else "-"


def bundled_models_dir() -> Path:
    """Where bundled models live: $STREAMASR_MODELS, else the repository's models/ folder (a
    clone or an editable install), else the demo model an installed wheel carries."""
    env = os.environ.get("STREAMASR_MODELS")
    if env:
        return Path(env)
    package = Path(__file__).resolve().parents[1]  # the streamasr package
    checkout = package.parent / "models"
    if (package.parent / "pyproject.toml").is_file() and checkout.is_dir():
        return checkout
    return package / "bundled_models"


def list_bundled() -> list[str]:
    """Names of the model folders shipped in models/."""
    root = bundled_models_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "tokens.txt").is_file())
