"""One NeMo audio stream: resampler, incremental features, encoder caches, decoder state."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from streamasr.audio.resample import StreamResampler
from streamasr.backends.base import Hypothesis
from streamasr.backends.nemo.features import IncrementalMel

if TYPE_CHECKING:
    from streamasr.backends.nemo.engine import NemoRecognizer

log = logging.getLogger("streamasr")

SAMPLE_RATE = 16000


@dataclass(frozen=True)
class ChunkPlan:
    """Which feature frames one encoder step reads, and how many outputs it drops."""

    start: int  # first feature frame given to the pre-encoder (includes its cache)
    end: int  # one past the last feature frame
    drop: int  # pre-encoded frames already emitted by earlier steps
    new_frames: int  # encoder output frames this step adds


class NemoStream:
    """One audio stream: resampler, incremental features, encoder caches, decoder state."""

    def __init__(self, recognizer: NemoRecognizer, keep_encoder_output: bool = False) -> None:
        import torch

        self.rec = recognizer
        self._mel = IncrementalMel(
            recognizer.model.preprocessor, recognizer.device, recognizer.hop, recognizer.n_fft
        )
        self._feats = torch.zeros((80, 0), device=recognizer.device)
        self._feat_base = 0  # absolute index of self._feats[:, 0]
        self._consumed = 0  # feature frames read by encoder steps so far
        self._emitted = 0  # encoder output frames so far
        self._finished = False
        self._resampler: StreamResampler | None = None  # once a non-16 kHz block arrives
        cache = recognizer.encoder.get_initial_cache_state(
            batch_size=1, device=torch.device(recognizer.device)
        )
        self.cache = (cache[0], cache[1], cache[2])
        self._dec_state = recognizer.initial_decoder_state()
        self._ids: list[int] = []
        self._frames: list[int] = []
        self._segment_start_frame = 0
        self._eou = False
        self.keep_encoder_output = keep_encoder_output
        self.encoder_output: list[np.ndarray] = []

    # ----- audio in -----

    def accept(self, sample_rate: int, samples: np.ndarray) -> None:
        """Buffer mono float32 audio at any rate; one streaming resampler per stream."""
        if self._finished:
            return
        samples = np.asarray(samples, np.float32)
        if sample_rate != SAMPLE_RATE:
            if self._resampler is None or self._resampler.from_hz != sample_rate:
                log.debug("resampling %d Hz input to %d Hz", sample_rate, SAMPLE_RATE)
                self._resampler = StreamResampler(sample_rate, SAMPLE_RATE)
            samples = self._resampler(samples)
        with self.rec.own_threads():
            self._mel.accept(samples)
            self._pull_features()

    def input_finished(self) -> None:
        """No more audio: flush the resampler; the last partial chunk becomes ready."""
        if self._finished:
            return
        with self.rec.own_threads():
            if self._resampler is not None:
                self._mel.accept(self._resampler.flush())
            self._mel.finish()
            self._pull_features()
        self._finished = True

    def _pull_features(self) -> None:
        import torch

        new = self._mel.pull()
        if new is not None:
            self._feats = torch.cat([self._feats, new], dim=1)

    # ----- encoder steps -----

    def plan(self) -> ChunkPlan | None:
        """The next encoder step, or None while too little audio is buffered."""
        rec = self.rec
        available = self._feat_base + self._feats.shape[1]
        need = rec.first_chunk_feats if self._consumed == 0 else rec.next_chunk_feats
        while True:
            if available - self._consumed >= need:
                end = self._consumed + need
            elif self._finished and available > self._consumed:
                end = available
            else:
                return None
            new_frames = rec.out_frames(end) - self._emitted
            if new_frames > 0:
                break
            self._consumed = end  # a tail too short to make an output frame
        start = max(0, self._consumed - rec.pre_cache_feats)
        drop = rec.out_frames(end - start) - new_frames
        return ChunkPlan(start=start, end=end, drop=drop, new_frames=new_frames)

    def features(self, plan: ChunkPlan):
        """(80, end - start) features of a plan."""
        return self._feats[:, plan.start - self._feat_base : plan.end - self._feat_base]

    def advance(self, plan: ChunkPlan, frames) -> None:
        """Record one step's encoder frames (frames, d_model) and decode them."""
        rec = self.rec
        if self.keep_encoder_output:
            self.encoder_output.append(frames.float().cpu().numpy())
        ids, at, self._dec_state = rec.greedy(frames, self._emitted, self._dec_state)
        self._ids.extend(ids)
        self._frames.extend(at)
        if rec.eou_ids and any(i in rec.eou_ids for i in ids):
            self._eou = True
        self._consumed = plan.end
        self._emitted += plan.new_frames
        keep_from = max(0, self._consumed - rec.pre_cache_feats)
        if keep_from > self._feat_base:
            self._feats = self._feats[:, keep_from - self._feat_base :]
            self._feat_base = keep_from

    def decode_step(self) -> bool:
        """Run one encoder chunk if enough audio is buffered; False when nothing ran."""
        return self.rec.decode_batch([self])[0]

    # ----- results -----

    def token_ids(self) -> tuple[int, ...]:
        """Token ids of the open segment."""
        return tuple(self._ids)

    def text(self) -> str:
        """Current text of the open segment."""
        return self.rec.text_of(self._ids)

    def hypothesis(self) -> Hypothesis:
        """Text, BPE pieces and absolute token times (start of their 80 ms frame)."""
        frame_s = self.rec.frame_s
        return Hypothesis(
            text=self.text(),
            tokens=tuple(self.rec.pieces[i] for i in self._ids),
            token_times_s=tuple(round(f * frame_s, 3) for f in self._frames),
            segment_start_s=round(self._segment_start_frame * frame_s, 3),
            end_of_utterance=self._eou,
            # the first chunk is shorter than the rest: the endpointer needs what was decoded
            segment_decoded_s=round((self._emitted - self._segment_start_frame) * frame_s, 6),
        )

    def reset(self) -> None:
        """Start a new segment; audio, features, encoder caches and decoder state carry on."""
        self._ids = []
        self._frames = []
        self._segment_start_frame = self._emitted
        self._eou = False
