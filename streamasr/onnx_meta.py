"""Read a streaming encoder's export settings from its ONNX metadata, without running it.

A sherpa-onnx streaming Zipformer fixes its chunk and look-ahead when it is exported, and
writes them into the ONNX file's metadata (`decode_chunk_len`, `T`, `left_context_len`).
Everything the latency arithmetic needs is there, so reading it is enough: no session, no
inference, no onnxruntime.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from streamasr.errors import ModelError

log = logging.getLogger("streamasr")

#: Frames of the 100 Hz fbank features per 50 Hz "chunk" frame (icefall's convention).
FBANK_FRAMES_PER_CHUNK_FRAME = 2


@dataclass(frozen=True)
class EncoderMetadata:
    """What an exported streaming encoder says about itself.

    `decode_chunk_len` and `T` count 100 Hz fbank frames: the encoder advances by
    `decode_chunk_len` frames per step but reads `T` frames, so `T - decode_chunk_len` frames
    are look-ahead that no attention mask shows.
    """

    path: Path
    model_type: str
    decode_chunk_len: int
    T: int  # named as the export writes it, so the reader can grep for it
    left_context_len: tuple[int, ...]
    raw: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def chunk(self) -> int:
        """Chunk in 50 Hz frames, the `--chunk` convention: decode_chunk_len / 2."""
        return self.decode_chunk_len // FBANK_FRAMES_PER_CHUNK_FRAME

    @property
    def lookahead_frames(self) -> int:
        """Fbank frames read past the chunk: the front end's look-ahead (13 for zipformer2)."""
        return self.T - self.decode_chunk_len

    @property
    def left_context(self) -> int:
        """Left context of the first (50 Hz) encoder stack, in 50 Hz frames; 0 if not given."""
        return self.left_context_len[0] if self.left_context_len else 0


def _load_metadata_props(path: Path) -> dict[str, str]:
    """The ONNX file's metadata_props as a dict; external weight files are not loaded."""
    import onnx  # imported here: `import streamasr` must not pay for protobuf parsing

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ... depending on the damage
        raise ModelError(
            f"{path} is not a readable ONNX file ({type(exc).__name__}: {exc}); "
            "download the model again or point at the encoder .onnx file"
        ) from exc
    return {p.key: p.value for p in model.metadata_props}


def _int(raw: dict[str, str], key: str, path: Path) -> int:
    """One integer metadata field, with an error that says which export is expected."""
    if key not in raw:
        raise ModelError(
            f"{path.name} has no '{key}' in its ONNX metadata, so it is not a sherpa-onnx "
            f"streaming Zipformer encoder export (keys found: {', '.join(sorted(raw)) or 'none'}); "
            "pass the encoder-*.onnx file of a streaming model"
        )
    try:
        return int(raw[key])
    except ValueError as exc:
        raise ModelError(f"{path.name}: metadata '{key}'={raw[key]!r} is not an integer") from exc


def read_encoder_metadata(path: str | Path) -> EncoderMetadata:
    """Read `model_type`, `decode_chunk_len`, `T` and `left_context_len` from an encoder file."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"encoder file {path} does not exist; check the model directory")
    raw = _load_metadata_props(path)
    decode_chunk_len = _int(raw, "decode_chunk_len", path)
    t_frames = _int(raw, "T", path)
    if decode_chunk_len <= 0 or t_frames < decode_chunk_len:
        raise ModelError(
            f"{path.name}: metadata decode_chunk_len={decode_chunk_len}, T={t_frames} is "
            "inconsistent (need 0 < decode_chunk_len <= T); the export is damaged"
        )
    left_text = raw.get("left_context_len", "").strip()
    try:
        left = tuple(int(v) for v in left_text.split(",") if v.strip()) if left_text else ()
    except ValueError as exc:
        raise ModelError(
            f"{path.name}: metadata left_context_len={left_text!r} is not a list of integers"
        ) from exc
    meta = EncoderMetadata(
        path=path,
        model_type=raw.get("model_type", "unknown"),
        decode_chunk_len=decode_chunk_len,
        T=t_frames,
        left_context_len=left,
        raw=raw,
    )
    log.debug(
        "%s: model_type=%s decode_chunk_len=%d T=%d left_context_len=%s",
        path.name, meta.model_type, meta.decode_chunk_len, meta.T, left,
    )
    return meta
