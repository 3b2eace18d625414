"""The core endpointer against sherpa-onnx's own endpointing, step by step, on real models."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import sherpa_onnx
import soundfile as sf

from streamasr.backends.base import EndpointOptions, Hypothesis
from streamasr.backends.sherpa.engine import SherpaStream
from streamasr.backends.sherpa.modeldir import resolve_model
from streamasr.session.endpointing import Endpointer

REPO = Path(__file__).resolve().parent.parent
CLIPS = REPO / "models" / "tiny-en" / "test_wavs"
OUTPUT_FRAME_S = 0.04


@functools.cache
def engine_with_endpointing(model: str, chunk: int, rules: EndpointOptions) -> tuple:
    """One recognizer per model, chunk and rules for the whole file (each test makes its own
    stream: a recognizer keeps no state between streams, and building one is most of a test)."""
    files = resolve_model(model, chunk)
    common = dict(
        tokens=str(files.tokens),
        num_threads=1,
        enable_endpoint_detection=True,
        rule1_min_trailing_silence=rules.rule1_s,
        rule2_min_trailing_silence=rules.rule2_s,
        rule3_min_utterance_length=rules.rule3_s,
    )
    if files.kind == "transducer":
        engine = sherpa_onnx.OnlineRecognizer.from_transducer(
            encoder=str(files.encoder), decoder=str(files.decoder), joiner=str(files.joiner),
            **common,
        )
    else:
        engine = sherpa_onnx.OnlineRecognizer.from_zipformer2_ctc(
            model=str(files.encoder), **common
        )
    return engine, files.chunk_s


def speech_with_pauses(clip: Path) -> tuple[np.ndarray, int]:
    """The clip, 3 s of silence, the clip again, the tail padding: rule1 and rule2 both fire."""
    audio, rate = sf.read(clip, dtype="float32")
    gap = np.zeros(3 * rate, np.float32)
    return np.concatenate([audio, gap, audio, np.zeros(int(0.66 * rate), np.float32)]), rate


def decisions(
    model: str, chunk: int, clip: Path, rules: EndpointOptions, block_s: float
) -> list[tuple[int, bool, str | None, Hypothesis]]:
    """(step, engine says endpoint, core rule or None, hypothesis) for every encoder step."""
    engine, chunk_s = engine_with_endpointing(model, chunk, rules)
    stream = SherpaStream(engine)
    core = Endpointer(rules, OUTPUT_FRAME_S)
    audio, rate = speech_with_pauses(clip)
    block = max(1, int(block_s * rate))
    out = []
    step = 0
    for start in range(0, len(audio), block):
        stream.accept(rate, audio[start : start + block])
        while stream.decode_step():
            step += 1
            hyp = stream.hypothesis()
            mine = core.step(chunk_s, hyp)
            theirs = bool(engine.is_endpoint(stream.stream))
            out.append((step, theirs, mine.rule if mine else None, hyp))
            if theirs:
                stream.reset()
                core.reset()
    return out


@pytest.mark.parametrize("block_s", [0.01, 0.1, 0.32, 100.0])
@pytest.mark.parametrize("chunk", [16, 32])
@pytest.mark.parametrize("clip", ["0.wav", "2.wav", "4.wav"])
def test_core_endpointer_matches_sherpa_on_a_trained_transducer(
    clip: str, chunk: int, block_s: float
) -> None:
    rules = EndpointOptions()
    steps = decisions("tiny-en", chunk, CLIPS / clip, rules, block_s)
    fired = [(s, rule) for s, theirs, rule, _ in steps if theirs]
    assert [rule for _, rule in fired].count("rule2") >= 1, "the pause ends the sentence"
    assert [(s, theirs) for s, theirs, _, _ in steps] == [
        (s, rule is not None) for s, _, rule, _ in steps
    ]


@pytest.mark.parametrize("chunk", [16, 32])
def test_core_endpointer_matches_sherpa_on_random_transducer_with_every_rule(chunk: int) -> None:
    # a random model talks through silence: rule3 (utterance length) does the cutting,
    # and a short rule1 catches segments where it stays blank
    rules = EndpointOptions(rule1_s=0.8, rule2_s=0.6, rule3_s=2.0)
    steps = decisions("tiny-random-transducer", chunk, CLIPS / "3.wav", rules, 0.1)
    assert sum(theirs for _, theirs, _, _ in steps) >= 3
    assert [theirs for _, theirs, _, _ in steps] == [rule is not None for _, _, rule, _ in steps]


def test_ctc_difference_is_pinned_to_held_labels() -> None:
    """A CTC label held over frames is speech to the engine; a token time marks its first frame.

    So the core may end a CTC utterance earlier than sherpa-onnx would, never later, and only
    while the last token stays the same (the engine sees it held, the core sees silence).
    """
    rules = EndpointOptions(rule3_s=3.0)
    steps = decisions("tiny-random-ctc", 16, CLIPS / "0.wav", rules, 0.1)
    differing = [(s, theirs, rule, hyp) for s, theirs, rule, hyp in steps if theirs != bool(rule)]
    assert differing, "the random CTC model holds labels; a difference is expected"
    for _, theirs, rule, hyp in differing:
        assert not theirs and rule == "rule2"
        assert hyp.tokens, "only after a token can a label be held"
    engine_endpoints = [rule for _, theirs, rule, _ in steps if theirs]
    assert engine_endpoints and all(engine_endpoints), (
        "whenever sherpa-onnx ends a CTC utterance, the core does too"
    )


def test_end_of_utterance_token_ends_at_once() -> None:
    core = Endpointer(EndpointOptions(), OUTPUT_FRAME_S)
    hyp = Hypothesis(text="hi", tokens=("hi",), token_times_s=(0.08,), end_of_utterance=True)
    decision = core.step(0.32, hyp)
    assert decision is not None and decision.rule == "eou"


def test_disabled_endpointing_never_fires() -> None:
    core = Endpointer(EndpointOptions(enabled=False), OUTPUT_FRAME_S)
    assert all(core.step(0.32, Hypothesis(text="")) is None for _ in range(200))


def test_trailing_silence_counts_whole_frames_after_the_last_token() -> None:
    core = Endpointer(EndpointOptions(rule2_s=1.2), OUTPUT_FRAME_S)
    # token at frame 2 of the segment (0.08 s), 1.28 s decoded = 32 frames: 29 frames after it
    hyp = Hypothesis(text="a", tokens=("a",), token_times_s=(5.081,), segment_start_s=5.0)
    assert core.step(1.28, hyp) is None  # 29 x 40 ms = 1.16 s < 1.2 s
    decision = core.step(0.04, hyp)
    assert decision is not None and decision.rule == "rule2"
    assert decision.trailing_silence_s == pytest.approx(1.2)
