"""Mel features computed block by block, equal to computing them over the whole audio.

A microphone cannot wait for the end of the recording, so features must come out as audio
arrives. NeMo's preprocessor frames audio with a centred 512-sample window every 160 samples
and pre-emphasises each sample with the one before it. Re-running it from two frames before
the next frame due, and keeping only frames whose window lies wholly inside the audio seen,
gives exactly the frames the whole-audio pass gives: the two discarded frames absorb the
edge effects (zero padding of the centred window, the unfiltered first sample).
"""

from __future__ import annotations

import numpy as np


class IncrementalMel:
    """Feeds 16 kHz audio in; hands out (features, frames) for frames that are final.

    `preprocessor` is the model's AudioToMelSpectrogramPreprocessor (eval mode, no dither,
    no per-utterance normalisation). Frames are numbered as in the whole-audio pass: audio of
    n samples has n // 160 frames.
    """

    def __init__(self, preprocessor: object, device: object, hop: int, n_fft: int) -> None:
        self._pre = preprocessor
        self._device = device
        self._hop = hop  # samples per frame (160 = 10 ms)
        # a frame centred at t * hop reads samples up to t * hop + n_fft // 2
        self._half_window = n_fft // 2
        # frames re-computed and discarded before the next one due: those whose window
        # reaches the start of the re-run piece (2 for n_fft 512, hop 160)
        self._warmup = -(-self._half_window // hop)
        self._audio = np.zeros(0, np.float32)
        self._audio_start = 0  # absolute index of self._audio[0]
        self._samples = 0  # samples accepted so far
        self.frames_done = 0  # frames handed out so far
        self._finished = False

    def accept(self, samples: np.ndarray) -> None:
        """Buffer 16 kHz mono float32 samples."""
        self._audio = np.concatenate([self._audio, np.asarray(samples, np.float32)])
        self._samples += len(samples)

    def finish(self) -> None:
        """End of audio: the last frames are padded with zeros, as the whole-audio pass does."""
        self._finished = True

    def pull(self):
        """Features of every frame that became final since the last pull, (80, n) tensor."""
        import torch

        if self._finished:
            last = self._samples // self._hop  # exclusive
        else:
            last = max(0, (self._samples - self._half_window) // self._hop + 1)
            last = min(last, self._samples // self._hop)
        if last <= self.frames_done:
            return None
        first_frame = max(0, self.frames_done - self._warmup)
        start = first_frame * self._hop
        piece = self._audio[start - self._audio_start :]
        signal = torch.from_numpy(np.ascontiguousarray(piece)).to(self._device)[None, :]
        length = torch.tensor([len(piece)], device=self._device)
        with torch.inference_mode():
            feats, _ = self._pre(input_signal=signal, length=length)
        out = feats[0, :, self.frames_done - first_frame : last - first_frame]
        self.frames_done = last
        keep_from = (max(0, self.frames_done - self._warmup) - 1) * self._hop
        if keep_from > self._audio_start:
            self._audio = self._audio[keep_from - self._audio_start :]
            self._audio_start = keep_from
        return out
