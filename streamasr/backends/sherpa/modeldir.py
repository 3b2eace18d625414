"""Find the ONNX files of a model directory and pick the export for a chunk size.

A streaming Zipformer's chunk is fixed at export time, so `--chunk` selects among the exports
in a directory (or checks the only one) and never feeds a model a chunk it was not built for.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePath

from streamasr.backends.sherpa.onnx_meta import (
    EncoderMetadata,
    external_data_locations,
    read_encoder_metadata,
    read_onnx_header,
)
from streamasr.distribution import cache, catalog, manifest
from streamasr.distribution.local_models import FolderFacts, bundled_models_dir, list_bundled
from streamasr.errors import ModelError, ModelMismatchError, StreamAsrError
from streamasr.text.tokens import MAX_TOKEN_ID, token_id
from streamasr.whole_file import check_file, read_whole

log = logging.getLogger("streamasr")

# Models shipped in the repository's models/ folder, by name.
BUNDLED_DEFAULT_ORDER = ("tiny-en", "tiny-random-transducer")
CHUNK_TAG = re.compile(r"chunk-(\d+)-left-(\d+)")
#: A tokens.txt larger than this is not a vocabulary (the largest released ones are ~100 kB).
MAX_TOKENS_BYTES = 16 << 20
#: an ONNX file is one protobuf message, which cannot exceed 2 GiB (larger weights are kept
#: as external data beside it)
MAX_ONNX_BYTES = 2 << 30
_REPULL = (
    "a sherpa-onnx model folder holds regular .onnx files; re-pull a released model with "
    "`streamasr models pull NAME --force`"
)


@dataclass(frozen=True)
class ModelFiles:
    """The files of one export of a model, with what its encoder metadata says."""

    name: str
    kind: str  # "transducer" or "ctc"
    directory: Path
    encoder: Path  # the encoder (transducer) or the whole model (ctc)
    tokens: Path
    metadata: EncoderMetadata
    decoder: Path | None = None
    joiner: Path | None = None

    @property
    def chunk(self) -> int:
        """Chunk in 50 Hz frames (icefall convention): decode_chunk_len / 2."""
        return self.metadata.chunk

    @property
    def chunk_s(self) -> float:
        """Audio consumed per encoder step, in seconds."""
        return self.metadata.chunk * 0.02

    def onnx_files(self) -> tuple[Path, ...]:
        """Every ONNX file this export runs, for checksums in run records."""
        return tuple(p for p in (self.encoder, self.decoder, self.joiner) if p is not None)


def resolve_model(
    model: str | None, chunk: int | None = None, prefer_int8: bool = True
) -> ModelFiles:
    """Turn `--model NAME|DIR` and `--chunk N` into the files of one export."""
    directory = _model_directory(model)
    tokens = directory / "tokens.txt"
    if not tokens.exists():  # what it is, and its size, check_tokens checks
        raise ModelError(
            f"model directory {directory} has no tokens.txt; a sherpa-onnx model directory "
            "needs tokens.txt beside its ONNX files"
        )
    onnx_files = sorted(directory.glob("*.onnx"))
    if not onnx_files:
        raise ModelError(f"model directory {directory} has no .onnx files")
    for path in onnx_files:  # each is read by sherpa-onnx whole, so refused here first
        check_file(path, "model file", MAX_ONNX_BYTES, _REPULL, ModelError)
    encoders = [p for p in onnx_files if "encoder" in p.name]
    if encoders:
        candidates, kind = encoders, "transducer"
    else:
        candidates = [p for p in onnx_files if "decoder" not in p.name and "joiner" not in p.name]
        kind = "ctc"
    exports: dict[int, list[tuple[Path, EncoderMetadata]]] = {}
    for path in candidates:
        meta = read_encoder_metadata(path)
        if meta.model_type != "zipformer2":
            log.debug("%s: model_type %r, not a zipformer2 export", path.name, meta.model_type)
        exports.setdefault(meta.chunk, []).append((path, meta))
    by_chunk = {
        chunk_len: _prefer_precision_pairs(pairs, prefer_int8)
        for chunk_len, pairs in exports.items()
    }
    available = sorted(by_chunk)
    if chunk is None:
        chosen = 16 if 16 in by_chunk else available[0]
    elif chunk in by_chunk:
        chosen = chunk
    else:
        raise ModelMismatchError(
            f"model {directory.name} has no export for --chunk {chunk}; it has chunk "
            f"{', '.join(str(c) for c in available)} (50 Hz frames, 16 = 320 ms). "
            "Pick one of those, or export the model again with that chunk size"
        )
    encoder, meta = by_chunk[chosen]
    if not prefer_int8 and int8_files([encoder]):
        raise ModelMismatchError(
            f"--fp32: model {directory.name} has only int8 files for chunk {chosen} "
            f"({encoder.name}); drop --fp32, or add the fp32 export"
        )
    if kind == "ctc":
        files = ModelFiles(directory.name, kind, directory, encoder, tokens, meta)
    else:
        decoder = _partner(onnx_files, "decoder", encoder, prefer_int8)
        joiner = _partner(onnx_files, "joiner", encoder, prefer_int8)
        files = ModelFiles(
            directory.name, kind, directory, encoder, tokens, meta, decoder, joiner
        )
    check_confined(files)
    check_tokens(files)
    return files


#: Files beside the ONNX files that an engine may read (hotwords read bpe.vocab).
SIDE_FILES = ("bpe.vocab", "bpe.model")


def check_confined(files: ModelFiles) -> None:
    """Refuse a model whose files, or the tensor data its ONNX files name, lie outside it.

    Why: a model folder is data from elsewhere. A tokens.txt or bpe.vocab that is a link to
    another file, or an ONNX initializer whose external data location is `../../etc/passwd`,
    makes loading the model read a file the user never meant to hand over.
    """
    folder = Path(os.path.realpath(files.directory))
    used = [*files.onnx_files(), files.tokens]
    used += [files.directory / n for n in SIDE_FILES if os.path.lexists(files.directory / n)]
    for path in used:
        _check_inside(folder, path, f"{path.name} is a link to a file outside the model folder")
    for onnx_file in files.onnx_files():
        for location in external_data_locations(onnx_file):
            pure = PurePath(location)
            where = f"{onnx_file.name} keeps tensor data in {location!r}"
            if not location or pure.is_absolute() or ".." in pure.parts:
                raise _outside(files.directory, f"{where}, outside the model folder")
            _check_inside(folder, files.directory / location, f"{where}, outside the model folder")


def _check_inside(folder: Path, path: Path, why: str) -> None:
    real = Path(os.path.realpath(path))
    if real != folder and folder not in real.parents:
        raise _outside(folder, why)


def _outside(folder: Path, why: str) -> ModelError:
    return ModelError(
        f"refusing to load the model in {folder}: {why}. A model may read only files in its "
        "own folder; copy the file in (not a link), or use the model as released"
    )


def model_vocab_size(files: ModelFiles) -> tuple[int, Path] | None:
    """How many tokens the model scores, and the file that says so; None if it does not say.

    The joiner's `logit` output (transducer) or the model's `log_probs` output (CTC) has the
    vocabulary as its last dimension; the decoder's `vocab_size` metadata is the fallback.
    Read from the ONNX header only, so it costs nothing at any model size.
    """
    source = files.joiner if files.kind == "transducer" else files.encoder
    output_name = "logit" if files.kind == "transducer" else "log_probs"
    if source is not None:
        out = read_onnx_header(source).output(output_name)
        if out is not None and out.shape and isinstance(out.shape[-1], int) and out.shape[-1] > 0:
            return out.shape[-1], source
    if files.decoder is not None:
        raw = read_onnx_header(files.decoder).metadata.get("vocab_size", "")
        if raw.isdigit() and int(raw) > 0:
            return int(raw), files.decoder
    return None


def check_tokens(files: ModelFiles) -> int:
    """Refuse a tokens.txt that does not fit the model, before the engine sees it.

    Why: sherpa-onnx indexes tokens.txt with the model's token ids, so a short or empty file
    ends in an IndexError later, and a binary one makes the engine exit 255 with junk on
    stderr. Returns the number of tokens.
    """
    path = files.tokens
    fix = (
        "use the tokens.txt that came with this model (re-pull a released model with "
        "`streamasr models pull NAME --force`)"
    )
    data = read_whole(path, "token list", MAX_TOKENS_BYTES, fix, ModelError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelError(
            f"{path} is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}), so it "
            f"is not a token list; {fix}"
        ) from exc
    if "\x00" in text:
        raise ModelError(f"{path} contains NUL bytes, so it is not a token list; {fix}")
    ids: set[int] = set()
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        token = token_id(parts[-1])
        if len(parts) > 2 or token is None:
            raise ModelError(
                f"{path}:{number}: expected '<symbol> <id>' (an id from 0 to {MAX_TOKEN_ID}), "
                f"got {line[:40]!r}; {fix}"
            )
        ids.add(token)
    if not ids:
        raise ModelError(f"{path} is empty: it lists no tokens; {fix}")
    expected = model_vocab_size(files)
    if expected is None:
        log.debug("%s: the model does not say its vocabulary size; not checked", path)
        return len(ids)
    vocab, source = expected
    missing = [i for i in range(vocab) if i not in ids]
    if missing:
        raise ModelError(
            f"{path} lists {len(ids)} tokens but {source.name} scores {vocab} "
            f"(ids 0-{vocab - 1}; first missing id {missing[0]}), so it belongs to another "
            f"model; {fix}"
        )
    if len(ids) > vocab:
        log.debug("%s lists %d tokens, the model scores %d", path, len(ids), vocab)
    return len(ids)


def _model_directory(model: str | None) -> Path:
    root = bundled_models_dir()
    if model is None:
        for name in BUNDLED_DEFAULT_ORDER:
            if (root / name / "tokens.txt").is_file():
                return root / name
        raise ModelError(
            f"no bundled model found under {root}; pass --model DIR with a sherpa-onnx "
            "streaming model directory"
        )
    path = Path(model).expanduser()
    if path.is_dir():
        manifest.check_model_path(path)  # a pulled folder given by path is checked too
        return path
    if (root / model).is_dir():
        manifest.check_model_path(root / model)  # a bundled folder recorded in place
        return root / model
    released = catalog.find(model)
    if released is not None and released.kind == "punctuation":
        raise ModelMismatchError(
            f"--model {model}: {released.name} is a punctuation model, not a speech model; "
            f"pass it to `streamasr file --punctuate {model}` and choose a speech model for "
            "--model (`streamasr models list`)"
        )
    cached = cache.open_cached(model)  # pulled with `streamasr models pull`; checked first
    if cached is not None:
        return cached
    if released is not None:
        raise ModelError(
            f"model {model!r} ({released.name}) is not downloaded yet; run "
            f"`streamasr models pull {model}`, or pass --model DIR"
        )
    if path.exists():
        raise ModelError(f"--model {model} is a file; pass the directory that holds it")
    raise ModelError(
        f"unknown model {model!r}: not a directory, a bundled or a released model; "
        f"{catalog.did_you_mean(model, list_bundled())}. Or pass a directory with tokens.txt "
        "and ONNX files"
    )


def int8_files(paths: Iterable[Path]) -> list[Path]:
    """The int8 files of an export (`*.int8.onnx`): the precision rule, here only."""
    return [p for p in paths if ".int8." in p.name]


def has_fp32_export(paths: Iterable[Path]) -> bool:
    """Whether every int8 file among `paths` has its fp32 twin beside it (what --fp32 needs)."""
    return all((p.parent / p.name.replace(".int8.", ".")).is_file() for p in int8_files(paths))


def _prefer_precision(paths: list[Path], prefer_int8: bool) -> list[Path]:
    """Keep int8 files when asked and present (per export), else the fp32 ones."""
    int8 = int8_files(paths)
    fp32 = [p for p in paths if p not in int8]
    if prefer_int8 and int8:
        return int8
    return fp32 or int8


def _prefer_precision_pairs(
    pairs: list[tuple[Path, EncoderMetadata]], prefer_int8: bool
) -> tuple[Path, EncoderMetadata]:
    """Of the files for one chunk: int8 when preferred and present, else fp32; of several
    left contexts (released models ship left 64 and 128), the longest history."""
    allowed = set(_prefer_precision([path for path, _ in pairs], prefer_int8))
    usable = [pair for pair in pairs if pair[0] in allowed]
    return max(usable, key=lambda pair: (pair[1].left_context, pair[0].name))


def _partner(onnx_files: list[Path], role: str, encoder: Path, prefer_int8: bool) -> Path:
    """The decoder/joiner that belongs with an encoder: same chunk tag if tagged, else the one."""
    options = _prefer_precision([p for p in onnx_files if role in p.name], prefer_int8)
    if not options:
        raise ModelError(
            f"model directory {encoder.parent} has an encoder but no {role} ONNX file; "
            f"a transducer needs encoder, decoder and joiner files"
        )
    tag = CHUNK_TAG.search(encoder.name)
    if tag:
        same = [p for p in options if tag.group(0) in p.name]
        if same:
            return same[0]
    untagged = [p for p in options if not CHUNK_TAG.search(p.name)]
    return (untagged or options)[0]


def describe_folder(directory: Path) -> FolderFacts:
    """Facts of a sherpa-onnx model folder (`models list`), read without loading weights;
    unknown where its files do not say or cannot be read."""
    from streamasr.text.tokens import read_vocabulary

    try:
        files = resolve_model(str(directory))
        vocabulary = read_vocabulary(files.tokens)
    except (StreamAsrError, OSError, ValueError):
        return FolderFacts()
    tags = (CHUNK_TAG.search(p.name) for p in directory.glob("*.onnx"))
    chunks = sorted({int(tag.group(1)) for tag in tags if tag} or {files.chunk})
    return FolderFacts("sherpa-onnx", files.kind, vocabulary.token_type, tuple(chunks))
