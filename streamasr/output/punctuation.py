"""Punctuation and casing of finals by sherpa-onnx's online punctuation model.

The model (`sherpa-onnx-online-punct-en-2024-08-06`, alias `punct-en`, and any folder in the
same format) is a CNN-BiLSTM that puts `,` `.` `?` after words and restores their case:
each word is left as it is, written in capitals or capitalised. A folder holds `model.onnx`
(or `model.int8.onnx`) and `bpe.vocab`; the model's format is described in
`scripts/make_punct_model.py`, which builds the tiny test model in `models/tiny-punct-en/`.

sherpa-onnx ends the whole process (no exception) when the vocabulary has a malformed line or
the model lacks its metadata, so both are checked here first, and a damaged folder is a
one-line ModelError instead.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from streamasr.distribution.cache import PUNCTUATION_FILES, PUNCTUATION_VOCAB
from streamasr.errors import DependencyError, ModelError, UsageError
from streamasr.extras import install_hint
from streamasr.whole_file import MIB, check_file, read_whole

log = logging.getLogger("streamasr")

#: Metadata sherpa-onnx reads, with the only values its decoder supports.
REQUIRED_METADATA = {
    "COMMA": "1", "PERIOD": "2", "QUESTION": "3", "UPPER": "1", "CAP": "2", "MIX_CASE": "3",
}
ONNX_INT32 = 6
#: sherpa-onnx reads the model and the vocabulary whole: the released model is about 28 MB
#: (fp32) and its vocabulary a few hundred KB, so these leave room for larger variants
MAX_MODEL_BYTES = 256 * MIB
MAX_VOCAB_BYTES = 16 * MIB
RELEASE_ALIAS = "punct-en"


def resolve(value: str) -> Path:
    """The folder `--punctuate VALUE` names: a folder, or a pulled catalog punctuation model.

    A released model that is not pulled yet is refused with the pull command (nothing is
    downloaded behind the user's back).
    """
    from streamasr.distribution import cache, catalog

    path = Path(value).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ModelError(
            f"--punctuate {value} is a file; pass the folder that holds {PUNCTUATION_FILES[0]} "
            f"and {PUNCTUATION_VOCAB}"
        )
    entry = catalog.find(value)
    if entry is not None and entry.kind != "punctuation":
        raise UsageError(
            f"--punctuate {value}: {entry.name} is a speech model; --punctuate takes a "
            f"punctuation model ({RELEASE_ALIAS}) or its folder"
        )
    if entry is not None:
        cached = cache.open_cached(value)
        if cached is None:
            raise ModelError(
                f"punctuation model {value!r} ({entry.name}) is not downloaded yet; run "
                f"`streamasr models pull {value}`, or pass --punctuate DIR"
            )
        return cached
    raise ModelError(
        f"--punctuate {value}: no such folder and not a known punctuation model; use "
        f"{RELEASE_ALIAS} (`streamasr models pull {RELEASE_ALIAS}`) or a folder with "
        f"{PUNCTUATION_FILES[0]} and {PUNCTUATION_VOCAB}"
    )


def model_file(directory: Path) -> Path:
    """The model file of a punctuation folder; a one-line error naming what is missing."""
    for name in PUNCTUATION_FILES:
        if (directory / name).exists():  # what it is, is checked by check_folder
            return directory / name
    raise ModelError(
        f"{directory} is not a punctuation model folder: no {' or '.join(PUNCTUATION_FILES)}; "
        f"pull it again (`streamasr models pull {RELEASE_ALIAS} --force`) or pass another "
        "folder to --punctuate"
    )


def check_folder(directory: Path) -> tuple[Path, Path]:
    """(model, vocabulary) of a punctuation folder, after checking what sherpa-onnx would
    otherwise end the process on."""
    model = model_file(directory)
    vocab = directory / PUNCTUATION_VOCAB
    again = (
        f"pull it again (`streamasr models pull {RELEASE_ALIAS} --force`) or pass another "
        "folder to --punctuate"
    )
    if not vocab.exists():
        raise ModelError(f"{directory} has no {PUNCTUATION_VOCAB}; {again}")
    _check_vocab(vocab, again)
    check_file(model, "punctuation model", MAX_MODEL_BYTES, again, ModelError)
    _check_model(model, again)
    return model, vocab


def _check_vocab(vocab: Path, again: str) -> None:
    data = read_whole(vocab, "punctuation vocabulary", MAX_VOCAB_BYTES, again, ModelError)
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise ModelError(f"{vocab} cannot be read ({exc}); {again}") from exc
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 3:  # <unk>, <s>, </s> at least
        raise ModelError(f"{vocab} holds {len(lines)} pieces; it is damaged; {again}")
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if len(fields) != 2 or not _is_float(fields[1]):
            raise ModelError(
                f"{vocab} line {number} is not 'piece score' ({line[:40]!r}); {again}"
            )


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_model(model: Path, again: str) -> None:
    from streamasr.backends.sherpa.onnx_meta import read_onnx_header

    try:
        header = read_onnx_header(model)
    except ModelError as exc:
        raise ModelError(f"{model} is not a readable ONNX file; {again}") from exc
    wrong = [f"{k}={v}" for k, v in REQUIRED_METADATA.items() if header.metadata.get(k) != v]
    if wrong:
        raise ModelError(
            f"{model} is not an online punctuation model (its metadata lacks "
            f"{', '.join(wrong)}); pass --punctuate a folder like {RELEASE_ALIAS}'s"
        )
    shapes_ok = (
        len(header.inputs) == 3
        and all(i.elem_type == ONNX_INT32 for i in header.inputs)
        and len(header.outputs) == 2
        and all(len(o.shape) == 2 and isinstance(o.shape[1], int) for o in header.outputs)
    )
    if not shapes_ok:
        raise ModelError(
            f"{model} does not have the online punctuation model's inputs (3, int32) and "
            f"outputs (2, with a fixed class count); {again}"
        )


class Punctuator:
    """Punctuates and cases one text at a time with sherpa-onnx's OnlinePunctuation."""

    def __init__(self, directory: Path, num_threads: int = 1) -> None:
        model, vocab = check_folder(directory)
        try:
            import sherpa_onnx
        except ImportError as exc:
            raise DependencyError(
                f"--punctuate needs sherpa-onnx ({exc}); "
                f"{install_hint(packages=('sherpa-onnx',))}"
            ) from exc
        config = sherpa_onnx.OnlinePunctuationConfig(
            model_config=sherpa_onnx.OnlinePunctuationModelConfig(
                cnn_bilstm=str(model), bpe_vocab=str(vocab), num_threads=num_threads
            )
        )
        try:
            self._impl: Any = sherpa_onnx.OnlinePunctuation(config)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(
                f"{model} cannot be loaded by sherpa-onnx ({first}); "
                f"pull it again (`streamasr models pull {RELEASE_ALIAS} --force`) or pass "
                "another folder to --punctuate"
            ) from exc
        self.directory = directory
        log.info("punctuation model: %s", model)

    def punctuate(self, text: str) -> str:
        """`text` with punctuation and case restored, word for word (whitespace-separated).

        The model was trained on lower-case text, so the text is lower-cased first: an
        all-capitals recogniser's 'HOW ARE YOU' reads 'How are you?' with the real model.
        """
        if not text.strip():
            return text
        try:
            return str(self._impl.add_punctuation_with_case(text.lower()))
        except RuntimeError as exc:
            raise ModelError(
                f"the punctuation model in {self.directory} failed on a final ({exc}); "
                "pass another folder to --punctuate"
            ) from exc


def load(value: str, num_threads: int = 1) -> Punctuator:
    """`--punctuate VALUE`: resolve the folder, check it, load the model."""
    return Punctuator(resolve(value), num_threads)
