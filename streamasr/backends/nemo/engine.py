"""NVIDIA NeMo cache-aware FastConformer behind the Recognizer protocol (CUDA or CPU).

True streaming, the way a microphone must work: mel features are computed per feed block
(features.py), the encoder consumes one chunk of `R + 1` output frames per step with its
pre-encode cache and its three caches (`cache_last_channel`, `cache_last_time`,
`cache_last_channel_len`) carried between steps, and the greedy RNNT or CTC decoder carries
its state across chunks. For a model trained with chunked_limited attention and causal
convolutions this computes exactly what the model computes over the whole utterance at once
(tests/test_nemo_parity.py proves it on the bundled tiny models).

torch and nemo are imported inside functions: `import streamasr` must not need them.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from streamasr.backends.base import BackendInfo, RecognizerStream
from streamasr.backends.nemo.loading import (
    check_device,
    load_model,
    quiet_nemo,
    require_nemo,
)
from streamasr.backends.nemo.stream import SAMPLE_RATE, ChunkPlan, NemoStream
from streamasr.errors import ModelError, UsageError

log = logging.getLogger("streamasr")

EOU_PIECES = ("<EOU>", "<eou>")


@dataclass(frozen=True)
class OfflineResult:
    """The whole utterance through the encoder at once, and its greedy decoding."""

    encoder_frames: np.ndarray  # (frames, d_model) float32
    token_ids: tuple[int, ...]
    token_frames: tuple[int, ...]  # encoder output frame of each token


def format_context(att_context_size: Sequence[int]) -> str:
    """[70, 13] -> '70,13', the way --att-context-size spells it."""
    return ",".join(str(int(v)) for v in att_context_size)


class NemoRecognizer:
    """A loaded NeMo cache-aware streaming model at one trained look-ahead.

    `threads` sets torch's CPU threads for this recognizer's own work (None leaves torch's
    default, one per core): torch's count is process-wide, so each step sets it and gives
    the previous count back (`own_threads`).
    `cache_aware_only=False` lets a model that is not cache-aware (band attention or
    non-causal convolutions) be streamed the same way: its output then differs from offline,
    which is what the counter-example test measures. Users get the refusal.
    `trust_config=True` lets the .nemo's config name classes outside streamasr's allowlist
    (`--trust-model-config`: that runs code from the file).
    """

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        att_context_size: Sequence[int] | None = None,
        decoder: str | None = None,
        *,
        cache_aware_only: bool = True,
        max_symbols: int = 10,
        threads: int | None = None,
        trust_config: bool = False,
    ) -> None:
        self.device = check_device(device)
        if threads is not None:
            if threads < 1:
                raise UsageError(f"--threads must be at least 1, got {threads}")
        self.threads = threads
        require_nemo()
        self.path = Path(path)
        if not self.path.is_file():
            raise ModelError(
                f"NeMo model {self.path} does not exist; give a .nemo file "
                "(e.g. models/tiny-nemo-streaming/tiny-nemo-streaming.nemo)"
            )
        model = load_model(self.path, self.device, trust_config)
        self.model = model.eval()
        # a shallow copy shares the weights and owns the look-ahead (NeMo keeps it on the
        # encoder: att_context_size, streaming_cfg), so recognizers of one .nemo at
        # different look-aheads never switch each other's
        self.encoder = copy.copy(model.encoder)
        self.max_symbols = max_symbols
        self._check_streaming(cache_aware_only)
        self.att_context_size = self._pick_context(att_context_size)
        self.decoder = self._pick_decoder(decoder)
        self._setup_streaming()
        self._setup_heads()
        self.model.eval()

    # ----- model checks -----

    def _check_streaming(self, cache_aware_only: bool) -> None:
        enc = self.encoder
        if not hasattr(enc, "cache_aware_stream_step") or not hasattr(enc, "att_context_style"):
            raise ModelError(
                f"{self.path.name} has no cache-aware streaming encoder "
                f"({type(enc).__name__}); use a cache-aware FastConformer .nemo"
            )
        featurizer = getattr(self.model.preprocessor, "featurizer", None)
        normalize = getattr(featurizer, "normalize", None)
        if featurizer is None or normalize not in (None, "NA", "None", ""):
            raise ModelError(
                f"{self.path.name}: its features are normalised over the whole utterance "
                f"(normalize={normalize}), so they cannot be computed as audio arrives; use a "
                "streaming model (its preprocessor has normalize: NA)"
            )
        self.hop = int(featurizer.hop_length)
        self.n_fft = int(featurizer.n_fft)
        if int(self.model.preprocessor._sample_rate) != SAMPLE_RATE:
            raise ModelError(f"{self.path.name} is not a 16 kHz model; streamasr feeds 16 kHz")
        kernel = enc.layers[0].conv.depthwise_conv.kernel_size[0]
        causal = list(enc.conv_context_size) == [kernel - 1, 0]
        self.style = enc.att_context_style
        self.causal_conv = causal
        if cache_aware_only and (self.style != "chunked_limited" or not causal):
            raise ModelError(
                f"{self.path.name} is not a cache-aware streaming model "
                f"(att_context_style={self.style}, conv_context_size="
                f"{list(enc.conv_context_size)}); streamed output would differ from what the "
                "model computes offline. Use a model trained with chunked_limited attention "
                "and causal convolutions"
            )

    def _pick_context(self, wanted: Sequence[int] | None) -> list[int]:
        trained = [[int(v) for v in acs] for acs in self.encoder.att_context_size_all]
        if wanted is None:
            return trained[0]
        wanted = [int(v) for v in wanted]
        if wanted not in trained:
            raise UsageError(
                f"--att-context-size {format_context(wanted)} was not trained into "
                f"{self.path.name}; use one of: "
                f"{', '.join(format_context(acs) for acs in trained)}"
            )
        return wanted

    def _pick_decoder(self, wanted: str | None) -> str:
        heads = []
        if hasattr(self.model, "joint"):
            heads.append("rnnt")
        if hasattr(self.model, "ctc_decoder") or not heads:
            heads.append("ctc")
        if wanted is None:
            return getattr(self.model, "cur_decoder", heads[0])
        if wanted not in heads:
            raise UsageError(
                f"--decoder {wanted} is not available for {self.path.name}; "
                f"use one of: {', '.join(heads)}"
            )
        return wanted

    @contextlib.contextmanager
    def own_threads(self) -> Iterator[None]:
        """Run torch work on this recognizer's thread count, then restore the previous one:
        two recognizers with different counts in one process compute as each does alone.
        (Concurrent steps on several Python threads would still share the one setting.)"""
        if self.threads is None:
            yield
            return
        import torch

        before = torch.get_num_threads()
        if before != self.threads:
            torch.set_num_threads(self.threads)
        try:
            yield
        finally:
            if before != self.threads:
                torch.set_num_threads(before)

    def _setup_streaming(self) -> None:
        left, right = self.att_context_size
        enc = self.encoder
        with quiet_nemo():
            if self.style == "chunked_limited":
                enc.set_default_att_context_size(self.att_context_size)
            else:
                # stream a band model in chunks of R+1 frames, as a cache-aware one would be
                enc.att_context_size = self.att_context_size
                enc.setup_streaming_params(
                    chunk_size=right + 1, shift_size=right + 1, left_chunks=left // (right + 1)
                )
        cfg = enc.streaming_cfg
        self.chunk_frames = right + 1
        self.first_chunk_feats = int(cfg.chunk_size[0])
        self.next_chunk_feats = int(cfg.shift_size[1])
        self.pre_cache_feats = int(cfg.pre_encode_cache_size[1])
        self.subsampling = int(enc.subsampling_factor)
        self.frame_s = round(self.subsampling * self.hop / SAMPLE_RATE, 6)

    def _setup_heads(self) -> None:
        tok = self.model.tokenizer
        self.tokenizer = tok
        self.vocab = tok.vocab_size
        self.blank = self.vocab  # NeMo puts blank after the vocabulary for RNNT and CTC heads
        pieces = tok.ids_to_tokens(list(range(self.vocab)))
        self.pieces = pieces
        self.eou_ids = frozenset(i for i, p in enumerate(pieces) if p in EOU_PIECES)
        if self.decoder == "ctc":
            self.ctc_head = getattr(self.model, "ctc_decoder", None) or self.model.decoder

    # ----- what the core reads -----

    @property
    def description(self) -> str:
        """Model, look-ahead and decoding settings in one line, for summaries."""
        left, right = self.att_context_size
        return (
            f"{self.path.stem} (NeMo {type(self.model).__name__}, att_context_size "
            f"[{left},{right}]: chunk {self.chunk_s * 1000:.0f} ms, look-ahead "
            f"{self.lookahead_s * 1000:.0f} ms, {self.decoder} greedy, {self.device})"
        )

    @property
    def chunk_s(self) -> float:
        """Seconds of audio per encoder step: R + 1 output frames of 80 ms."""
        return round(self.chunk_frames * self.frame_s, 6)

    @property
    def lookahead_s(self) -> float:
        """Worst-case look-ahead. Chunked attention: R frames (first frame of a chunk); band
        attention: R per layer. Non-causal convolutions add their right context per layer."""
        right = self.att_context_size[1]
        layers = len(self.encoder.layers)
        if self.style != "chunked_limited":
            right *= layers
        right += int(self.encoder.conv_context_size[1]) * layers
        return round(right * self.frame_s, 6)

    @property
    def info(self) -> BackendInfo:
        """What the core, bench and renderers need to know about this model."""
        return BackendInfo(
            backend="nemo",
            model_name=self.path.stem,
            device=self.device,
            sample_rate_hz=SAMPLE_RATE,
            resamples_input=True,
            output_frame_s=self.frame_s,
            chunk_s=self.chunk_s,
            lookahead_s=self.lookahead_s,
            token_type="bpe",
            model_files=(self.path,),
            # the first chunk's last feature frame is complete half an FFT window past its
            # centre: (first chunk frames - 1) x hop + n_fft / 2
            first_step_s=round(
                ((self.first_chunk_feats - 1) * self.hop + self.n_fft // 2) / SAMPLE_RATE, 6
            ),
            settings={
                "att_context_size": format_context(self.att_context_size),
                "decoder": self.decoder,
            },
        )

    def create_stream(self, keep_encoder_output: bool = False) -> NemoStream:
        """Open a new stream; `keep_encoder_output` records every encoder frame (tests)."""
        return NemoStream(self, keep_encoder_output)

    # ----- stepping -----

    def out_frames(self, feats: int) -> int:
        """Encoder output frames the pre-encoder makes of `feats` feature frames."""
        import torch
        from nemo.collections.asr.parts.submodules.subsampling import calc_length

        pre = self.encoder.pre_encode
        if feats <= 0:
            return 0
        return int(
            calc_length(
                torch.tensor([feats]),
                all_paddings=pre._left_padding + pre._right_padding,
                kernel_size=pre._kernel_size,
                stride=pre._stride,
                ceil_mode=pre._ceil_mode,
                repeat_num=pre._sampling_num,
            )[0]
        )

    def decode_batch(
        self, streams: Sequence[RecognizerStream], *, checked: bool = False
    ) -> list[bool]:
        """One encoder step over every stream with a chunk ready, batched by window shape.

        Streams whose windows have the same length and drop run as one batch on the device.
        `checked` changes nothing here: a stream's plan is a Python question, not a call
        into the engine.
        """
        ours = [s for s in streams if isinstance(s, NemoStream)]
        if len(ours) != len(streams):
            raise TypeError("decode_batch takes streams this recognizer created")
        plans = [s.plan() for s in ours]
        groups: dict[tuple[int, int, int], list[tuple[NemoStream, ChunkPlan]]] = {}
        for stream, plan in zip(ours, plans, strict=True):
            if plan is not None:
                key = (plan.end - plan.start, plan.drop, plan.new_frames)
                groups.setdefault(key, []).append((stream, plan))
        for members in groups.values():
            self._step([s for s, _ in members], [p for _, p in members])
        return [p is not None for p in plans]

    def _step(self, streams: Sequence[NemoStream], plans: Sequence[ChunkPlan]) -> None:
        import torch

        plan = plans[0]
        with self.own_threads(), torch.inference_mode():
            window = torch.stack([s.features(p) for s, p in zip(streams, plans, strict=True)])
            lengths = torch.full((len(streams),), plan.end - plan.start, device=self.device)
            caches = [
                torch.cat([s.cache[k] for s in streams], dim=1 if k < 2 else 0) for k in range(3)
            ]
            enc, enc_len, c_channel, c_time, c_len = self.encoder.cache_aware_stream_step(
                processed_signal=window,
                processed_signal_length=lengths,
                cache_last_channel=caches[0],
                cache_last_time=caches[1],
                cache_last_channel_len=caches[2],
                keep_all_outputs=True,
                drop_extra_pre_encoded=plan.drop,
            )
            if int(enc.shape[-1]) != plan.new_frames:
                raise ModelError(
                    f"{self.path.name}: encoder step gave {int(enc.shape[-1])} frames where "
                    f"{plan.new_frames} were due; the model's subsampling is not supported"
                )
            frames = enc.transpose(1, 2)  # (batch, frames, d_model)
            for b, (stream, p) in enumerate(zip(streams, plans, strict=True)):
                stream.cache = (c_channel[:, b : b + 1], c_time[:, b : b + 1], c_len[b : b + 1])
                stream.advance(p, frames[b])
            if self.device.startswith("cuda"):
                torch.cuda.synchronize(self.device)

    # ----- decoding (shared by streaming and offline) -----

    def initial_decoder_state(self) -> tuple:
        """(pred output, pred state, last CTC id) before any token."""
        import torch

        if self.decoder == "ctc":
            return (None, None, -1)
        with torch.inference_mode():
            g, state = self.model.decoder.predict(None, state=None, add_sos=False, batch_size=1)
        return (g, state, -1)

    def greedy(self, frames, first_frame: int, state: tuple) -> tuple[list, list, tuple]:
        """Greedy decoding of (frames, d_model) encoder output; returns ids, frames, state."""
        import torch

        ids: list[int] = []
        at: list[int] = []
        with torch.inference_mode():
            if self.decoder == "ctc":
                log_probs = self.ctc_head(encoder_output=frames.T[None])[0]
                best = log_probs.argmax(-1).tolist()
                last = state[2]
                for t, k in enumerate(best):
                    if k != self.blank and k != last:
                        ids.append(k)
                        at.append(first_frame + t)
                    last = k
                return ids, at, (None, None, last)
            g, pred_state, _ = state
            joint = self.model.joint
            f_all = joint.project_encoder(frames[None])  # (1, T, H)
            for t in range(frames.shape[0]):
                f = f_all[:, t : t + 1]
                for _ in range(self.max_symbols):
                    logits = joint.joint_after_projection(f, joint.project_prednet(g))
                    k = int(logits[0, 0, 0].argmax())
                    if k == self.blank:
                        break
                    ids.append(k)
                    at.append(first_frame + t)
                    label = torch.tensor([[k]], device=frames.device)
                    g, pred_state = self.model.decoder.predict(
                        label, state=pred_state, add_sos=False, batch_size=1
                    )
        return ids, at, (g, pred_state, -1)

    def offline(self, samples: np.ndarray) -> OfflineResult:
        """The whole 16 kHz utterance through preprocessor, encoder and decoder at once."""
        import torch

        with self.own_threads(), torch.inference_mode():
            signal = torch.from_numpy(np.ascontiguousarray(samples, np.float32))
            signal = signal.to(self.device)[None]
            length = torch.tensor([signal.shape[1]], device=self.device)
            feats, feat_len = self.model.preprocessor(input_signal=signal, length=length)
            enc, enc_len = self.encoder(audio_signal=feats, length=feat_len)
            frames = enc[0, :, : int(enc_len[0])].T
            ids, at, _ = self.greedy(frames, 0, self.initial_decoder_state())
        return OfflineResult(frames.float().cpu().numpy(), tuple(ids), tuple(at))

    def text_of(self, ids: Sequence[int]) -> str:
        """Detokenised text of token ids (end-of-utterance marks left out)."""
        kept = [i for i in ids if i not in self.eou_ids]
        return self.tokenizer.ids_to_text(kept).strip() if kept else ""
