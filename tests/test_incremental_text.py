"""Text assembled step by step is exactly what assembling the whole hypothesis gives.

The reference is the whole-hypothesis assembly: `tidy_spacing` of the engine's text, and
`assemble` of the token pieces for byte-level models. Property tests feed random inputs that
mostly grow and sometimes change earlier items (as beam search does); the model tests run
every bundled sherpa-onnx model, greedy and beam search, and compare at every encoder step.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hypothesis import given, settings
from hypothesis import strategies as st

from streamasr.backends.base import EngineOptions
from streamasr.backends.plan import LoadPlan
from streamasr.backends.sherpa.engine import SherpaRecognizer, SherpaStream
from streamasr.text.prefix import Prefix
from streamasr.text.tokens import (
    WORD_BOUNDARY,
    PieceText,
    SpacedText,
    assemble,
    shared_prefix_len,
    tidy_spacing,
)

MODELS = Path(__file__).resolve().parent.parent / "models"
CLIPS = sorted((MODELS / "tiny-en" / "test_wavs").glob("*.wav"))
SHERPA_MODELS = (
    "tiny-en",
    "tiny-random-transducer",
    "tiny-random-bpe",
    "tiny-random-byte",
    "tiny-random-cjkchar",
    "tiny-random-cjkchar-bpe",
    "tiny-random-ctc",
)

CHARS = list("中文你好世界ABCabc 1,.。é😀\t\u3000\uff21") + [WORD_BOUNDARY, "\ufffd", "\x00"]
PIECES = [
    "<0xE4>", "<0xB8>", "<0xAD>", "<0xE6>", "<0x96>", "<0x87>", "<0xF0>", "<0x9F>", "<0x98>",
    "<0x80>", "<0xFF>", "<0xC3>", "<0xA9>", "<0x41>",
    f"{WORD_BOUNDARY}THE", "LLO", f"{WORD_BOUNDARY}HE", "你", "好", WORD_BOUNDARY, "\ufffd",
    " ", "é", ",", "\t", "A",
]  # fmt: skip


def _edits(items: list[str], ops: list[tuple[int, int]]) -> list[list[str]]:
    """Successive inputs: op (0, n) appends n items, (k, n) cuts k items then appends n."""
    pool = items or ["A"]
    current: list[str] = []
    out = []
    for step, (cut, grow) in enumerate(ops):
        if cut:
            del current[max(0, len(current) - cut) :]
        current.extend(pool[(step * 7 + i) % len(pool)] for i in range(grow))
        out.append(list(current))
    return out


OPS = st.lists(
    st.tuples(
        st.sampled_from([0, 0, 0, 0, 1, 2, 5, 100]),
        st.integers(min_value=0, max_value=6),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(CHARS), max_size=30), OPS)
def test_spaced_text_equals_tidy_spacing_at_every_step(chars: list[str], ops: list) -> None:
    revising = SpacedText(append_only=False)
    for items in _edits(chars, ops):
        raw = "".join(items)
        assert revising.update(raw) == tidy_spacing(raw)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(CHARS), max_size=30), OPS)
def test_append_only_spaced_text_equals_tidy_spacing(chars: list[str], ops: list) -> None:
    growing = SpacedText(append_only=True)
    for items in _edits(chars, [(0, grow) for _, grow in ops]):
        raw = "".join(items)
        assert growing.update(raw) == tidy_spacing(raw)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=30), OPS, st.booleans())
def test_piece_text_equals_assemble_at_every_step(
    pieces: list[str], ops: list, append_only: bool
) -> None:
    if append_only:
        ops = [(0, grow) for _, grow in ops]
    incremental = PieceText(append_only)
    previous: list[str] = []
    for step, items in enumerate(_edits(pieces, ops)):
        final = step % 5 == 4
        assert incremental.update(items, final) == assemble(items, final)
        assert incremental.unchanged == _slow_shared(previous, items)
        previous = items


def test_piece_text_resets_between_segments() -> None:
    incremental = PieceText()
    incremental.update(["<0xE4>", "<0xB8>"])
    incremental.reset()
    assert incremental.update(["A"]) == assemble(["A"])


@given(
    st.lists(st.sampled_from("abc"), max_size=12),
    st.lists(st.sampled_from("abc"), max_size=12),
    st.booleans(),
)
def test_shared_prefix_len(old: list[str], new: list[str], append_only: bool) -> None:
    expected = _slow_shared(old, new)
    assert shared_prefix_len("".join(old), "".join(new), False) == expected
    assert shared_prefix_len(tuple(old), tuple(new), False) == expected
    if new[: len(old)] == old:  # what append_only promises
        assert shared_prefix_len(tuple(old), tuple(new), append_only) == expected


def _slow_shared(old: list[str], new: list[str]) -> int:
    count = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        count += 1
    return count


def _audio(noise: bool) -> np.ndarray:
    """The bundled clips one after another (16 kHz); with noise for the random models, whose
    tokens are random whatever they hear."""
    clips = [sf.read(path, dtype="float32")[0] for path in CLIPS]
    audio = np.concatenate(clips)
    if noise:
        rng = np.random.default_rng(7)
        audio = audio + rng.normal(0, 0.05, len(audio)).astype(np.float32)
    return audio


def _reference_text(stream: SherpaStream) -> str:
    """Today's whole-hypothesis assembly, from the engine's current result."""
    result = stream.engine.get_result_all(stream.stream)
    if stream._from_pieces:
        final = stream._finished and not stream.engine.is_ready(stream.stream)
        return assemble(tuple(result.tokens), final=final).text
    return tidy_spacing(result.text)


def _reference_times(stream: SherpaStream, count: int) -> tuple[float, ...]:
    """Every token time converted from the engine's whole result, as before the step-wise
    conversion."""
    result = stream.engine.get_result_all(stream.stream)
    start = float(result.start_time)
    return tuple(np.round(np.add(result.timestamps, start), 3).tolist()[:count])


# CTC models decode greedily only: beam search is for the transducers
SETTINGS = [(m, "greedy_search") for m in SHERPA_MODELS] + [
    (m, "modified_beam_search") for m in SHERPA_MODELS if m != "tiny-random-ctc"
]


@pytest.mark.parametrize(("model", "method"), SETTINGS)
def test_every_step_matches_whole_hypothesis_assembly(model: str, method: str) -> None:
    own = {"decoding_method": method}
    recognizer = LoadPlan(str(MODELS / model), "sherpa-onnx", EngineOptions(own=own)).load()
    assert isinstance(recognizer, SherpaRecognizer)
    stream = recognizer.create_stream()
    audio = _audio(noise=model != "tiny-en")
    block = 5120
    steps = texts = pieces = revised = shared = 0
    previous: Sequence[str] = ()
    taken: list[tuple[Sequence[str], tuple[str, ...]]] = []  # snapshots, and what they held
    for begin in range(0, len(audio) + block, block):
        if begin < len(audio):
            stream.accept(16000, audio[begin : begin + block])
        else:
            stream.accept(16000, np.zeros(16000, np.float32))
            stream.input_finished()
        while stream.decode_step():
            steps += 1
            hyp = stream.hypothesis()
            assert hyp.text == _reference_text(stream), (model, method, steps)
            assert hyp.token_times_s == _reference_times(stream, len(hyp.tokens)), steps
            reference = stream.engine.get_result_all(stream.stream).tokens
            assert hyp.tokens == tuple(reference), (model, method, steps)
            assert hyp.unchanged_tokens == _slow_shared(list(previous), list(hyp.tokens))
            revised += hyp.unchanged_tokens < len(previous)
            # greedy search: this step's tokens are the previous step's list, appended to in
            # place, not a copy of the whole segment (streamasr.text.prefix)
            shared += isinstance(hyp.tokens, Prefix) and hyp.tokens.shares_storage(previous)
            taken.append((hyp.tokens, tuple(hyp.tokens)))
            texts += bool(hyp.text)
            pieces += bool(hyp.tokens)
            previous = hyp.tokens
            if steps % 17 == 0:  # an endpoint: the next segment starts from nothing
                stream.reset()
                previous = ()
    assert steps > 30 and pieces > 10 and texts > 0, (steps, pieces, texts)
    # no snapshot handed out changed afterwards, whatever came later (appends, resets, beams)
    assert all(snapshot == held for snapshot, held in taken)
    if method == "greedy_search":
        assert revised == 0
        assert shared >= pieces - steps // 17 - 1, (shared, pieces, steps)
    elif model == "tiny-random-cjkchar-bpe":
        # beam search takes back earlier pieces here: the path that re-assembles runs
        assert revised > 0
