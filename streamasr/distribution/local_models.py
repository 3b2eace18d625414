"""What a model folder on this machine is (bundled, or pulled under a custom name).

Why: `models list` shows every model a command can run, not only catalog entries; for a folder
the catalog knows nothing about, the facts come from the files themselves (the ONNX
metadata, tokens.txt), read without loading any weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from streamasr.errors import StreamAsrError

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
        """'320 ms' or '320/640 ms' (chunks are 50 Hz frames); '-' when none are known."""
        if not self.chunks:
            return "-"
        return "/".join(str(c * 20) for c in self.chunks) + " ms"


def describe_folder(directory: Path) -> FolderFacts:
    """Facts of a model folder; UNKNOWN where its files do not say (or cannot be read)."""
    from streamasr.backends.sherpa.modeldir import CHUNK_TAG, resolve_model
    from streamasr.tokens import read_vocabulary

    if any(directory.glob("*.nemo")):
        return FolderFacts(engine="nemo")
    try:
        files = resolve_model(str(directory))
        vocabulary = read_vocabulary(files.tokens)
    except (StreamAsrError, OSError, ValueError):
        return FolderFacts()
    tags = (CHUNK_TAG.search(p.name) for p in directory.glob("*.onnx"))
    chunks = sorted({int(tag.group(1)) for tag in tags if tag} or {files.chunk})
    return FolderFacts("sherpa-onnx", files.kind, vocabulary.token_type, tuple(chunks))
