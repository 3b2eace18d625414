"""Sessions are independent: several sessions with different engine settings in one process,
stepped in turn, each give exactly the tokens they give alone.

Real engines on the bundled models: sherpa-onnx on tiny-en's chunk 16 and chunk 32 exports,
NeMo on tiny-nemo-streaming at two trained look-aheads; each pair also runs with different
thread counts (torch's count is process-wide: the NeMo engine must set and restore its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

import streamasr
from streamasr.api import Model
from streamasr.audio import FileSource
from streamasr.session.events import Event, Final, Partial
from streamasr.session.stream import StreamSession

ROOT = Path(__file__).resolve().parents[1]
TINY_EN = ROOT / "models" / "tiny-en"
NEMO = ROOT / "models" / "tiny-nemo-streaming" / "tiny-nemo-streaming.nemo"
BLOCK_S = 0.1


def _audio(name: str) -> list[np.ndarray]:
    source = FileSource(str(TINY_EN / "test_wavs" / name))
    try:
        return list(source.blocks(BLOCK_S))
    finally:
        source.close()


def _tokens(events: Sequence[Event]) -> list[tuple[str, str, tuple[str, ...], tuple[float, ...]]]:
    """What must not change: every partial's and final's text, tokens and token times."""
    return [
        (e.kind, e.text, e.tokens, e.token_times_s)
        for e in events
        if isinstance(e, (Partial, Final))
    ]


def _solo(model: Model, blocks: list[np.ndarray]) -> list[Event]:
    return list(model.stream(blocks, 16000))


def _interleaved(models: Sequence[Model], blocks: Sequence[list[np.ndarray]]) -> list[list[Event]]:
    """One block into each session in turn, then single encoder steps taken in turn, one
    session after the other, until none has a chunk ready; at the end, the tail likewise."""
    sessions = [StreamSession(m.recognizer, 16000, str(i), m.stream_options)
                for i, m in enumerate(models)]
    events: list[list[Event]] = [[] for _ in sessions]
    longest = max(len(b) for b in blocks)

    def step_in_turn() -> None:
        stepped = True
        while stepped:
            stepped = False
            for index, session in enumerate(sessions):
                if session.stream.decode_step():
                    stepped = True
                    events[index].extend(session.after_step())

    for position in range(longest):
        for session, own in zip(sessions, blocks, strict=True):
            if position < len(own):
                session.accept(own[position])
        step_in_turn()
    for session in sessions:
        session.end_input()
    step_in_turn()
    for index, session in enumerate(sessions):
        events[index].extend(session.close())
    return events


def _check_pair(models: Sequence[Model], names: Sequence[str]) -> None:
    blocks = [_audio(name) for name in names]
    alone = [_tokens(_solo(model, own)) for model, own in zip(models, blocks, strict=True)]
    together = [_tokens(found) for found in _interleaved(models, blocks)]
    assert together == alone
    assert all(any(kind == "final" and text for kind, text, _, _ in run) for run in alone)


def test_sherpa_sessions_at_two_chunks_and_thread_counts_are_independent() -> None:
    a = streamasr.open_model(str(TINY_EN), chunk=16, threads=1)
    b = streamasr.open_model(str(TINY_EN), chunk=32, threads=2)
    assert (a.info.chunk_s, b.info.chunk_s) == (0.32, 0.64)
    _check_pair([a, b], ["0.wav", "1.wav"])


def test_nemo_sessions_at_two_lookaheads_and_thread_counts_are_independent() -> None:
    import torch

    threads_before = torch.get_num_threads()
    a = streamasr.open_model(str(NEMO), att_context_size="70,0", threads=1)
    b = streamasr.open_model(str(NEMO), att_context_size="70,1", threads=2)
    assert a.info.lookahead_s == 0.0 and b.info.lookahead_s == 0.08
    _check_pair([a, b], ["1.wav", "1.wav"])  # the shortest clip: torch on CPU is slow
    # each recognizer owns its look-ahead (one weight set, two encoders' settings) ...
    enc_a, enc_b = a.recognizer.encoder, b.recognizer.encoder
    assert [list(enc_a.att_context_size), list(enc_b.att_context_size)] == [[70, 0], [70, 1]]
    assert next(enc_a.parameters()) is next(enc_b.parameters())
    # ... and gives torch's process-wide thread count back after its work
    assert torch.get_num_threads() == threads_before
