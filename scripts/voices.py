"""English speech from several Debian synthesisers, varied the way rooms and people vary.

Why several engines: a model trained on one synthesiser learns that synthesiser's sound
(``tiny-en`` recognises espeak-ng and little else). Debian ships three kinds of English
synthesis: espeak-ng (formant), flite (diphone and statistical-parametric voices) and
festival (diphone and HTS voices). Each utterance also gets its own speed, pitch, level,
room reverb, band limit and noise (sox and numpy), so none of those identify a voice.

A voice is named ``engine:name``: ``espeak:en-us+m3``, ``flite:awb``,
``festival:kal_diphone``. Some voices never train, so a test can report how a model copes
with a voice it has never heard (``HELDOUT``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tts

SAMPLE_RATE = tts.SAMPLE_RATE

FLITE_VOICES = ("kal", "kal16", "awb", "rms", "slt")
FESTIVAL_VOICES = ("kal_diphone", "ked_diphone", "cmu_us_slt_arctic_hts")
# Whole Debian voices kept out of training: one flite voice and one festival voice, each a
# speaker no other training voice has, plus espeak-ng's held-out accent and variant.
HELDOUT_DEBIAN: frozenset[str] = frozenset({"flite:rms", "festival:ked_diphone"})
# How often each engine speaks a training utterance.
ENGINE_SHARE = {"espeak": 0.4, "flite": 0.35, "festival": 0.25}
TOOLS = {"espeak": "espeak-ng", "flite": "flite", "festival": "text2wave"}
APT_PACKAGES = "espeak-ng flite festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts sox"


def all_voices() -> list[str]:
    """Every voice of every engine, espeak-ng's accent x variant combinations included."""
    espeak = [f"espeak:{tts.voice_name(b, v)}" for b in tts.BASE_VOICES for v in tts.VARIANTS]
    return (
        espeak + [f"flite:{v}" for v in FLITE_VOICES] + [f"festival:{v}" for v in FESTIVAL_VOICES]
    )


def is_heldout(voice: str) -> bool:
    """True for voices that never train."""
    engine, _, name = voice.partition(":")
    if engine == "espeak":
        return tts.is_heldout_voice(name)
    return voice in HELDOUT_DEBIAN


def training_voices(engine: str) -> list[str]:
    return [v for v in all_voices() if v.startswith(engine + ":") and not is_heldout(v)]


def check_tools() -> None:
    """Fail early, with the fix, when a synthesiser or sox is missing."""
    missing = [t for t in [*TOOLS.values(), "sox"] if shutil.which(t) is None]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: apt-get install {APT_PACKAGES}")


@dataclass(frozen=True)
class Style:
    """How one utterance is spoken and recorded, drawn up front from the seed."""

    stretch: float  # duration factor: > 1 speaks slower
    pitch_cents: int  # sox pitch shift after synthesis
    reverb: int | None  # sox reverberance 0-100; None = dry
    room_scale: int
    lowpass_hz: int | None  # band limit of a cheap microphone or a phone line
    noise: str  # "white", "pink", "brown" or "none"
    snr_db: float
    peak_dbfs: float
    lead_s: float
    trail_s: float
    seed: int


def random_style(rng: np.random.Generator) -> Style:
    return Style(
        stretch=round(float(rng.uniform(0.8, 1.3)), 3),
        pitch_cents=int(rng.integers(-300, 301)),
        reverb=int(rng.integers(10, 80)) if rng.random() < 0.4 else None,
        room_scale=int(rng.integers(10, 100)),
        lowpass_hz=int(rng.choice([3400, 4000, 5500])) if rng.random() < 0.2 else None,
        noise=str(rng.choice(["white", "pink", "brown", "none"], p=[0.3, 0.3, 0.15, 0.25])),
        snr_db=round(float(rng.uniform(10.0, 40.0)), 1),
        peak_dbfs=round(float(rng.uniform(-24.0, -1.0)), 2),
        lead_s=round(float(rng.uniform(0.15, 0.8)), 3),
        trail_s=round(float(rng.uniform(0.3, 0.8)), 3),
        seed=int(rng.integers(0, 2**31 - 1)),
    )


def plain_style() -> Style:
    """No effects at all: the voice as the synthesiser makes it (for clean test sets)."""
    return Style(1.0, 0, None, 0, None, "none", 99.0, -3.0, 0.3, 0.6, 0)


def _speak(voice: str, text: str, stretch: float, workdir: Path) -> Path:
    """Run the engine, writing a WAV at its own rate; return its path."""
    engine, _, name = voice.partition(":")
    out = workdir / "speech.wav"
    words = text.lower()
    if engine == "espeak":
        wpm = int(round(170 / stretch))
        cmd = ["espeak-ng", "-v", name, "-s", str(wpm), "-w", str(out), words]
    elif engine == "flite":
        cmd = ["flite", "-voice", name, "--setf", f"duration_stretch={stretch}",
               "-t", words, "-o", str(out)]  # fmt: skip
    elif engine == "festival":
        (workdir / "text.txt").write_text(words + "\n", encoding="utf-8")
        setup = f"(voice_{name}) (Parameter.set 'Duration_Stretch {stretch})"
        cmd = ["text2wave", "-eval", setup, str(workdir / "text.txt"), "-o", str(out)]
    else:
        raise ValueError(f"unknown engine in voice {voice!r}")
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return out


def _effects(style: Style) -> list[str]:
    # Resample first: flite's kal is 8 kHz, and a band limit above its Nyquist would fail.
    effects = ["rate", "-v", str(SAMPLE_RATE), "channels", "1"]
    effects += ["pitch", str(style.pitch_cents)] if style.pitch_cents else []
    if style.lowpass_hz:
        effects += ["sinc", f"200-{style.lowpass_hz}"]
    if style.reverb is not None:
        effects += ["reverb", str(style.reverb), "50", str(style.room_scale)]
    return effects


def synthesize(voice: str, text: str, style: Style) -> np.ndarray:
    """Speech for text in a voice, with the style's pitch, band and room; float32 16 kHz."""
    with tempfile.TemporaryDirectory(prefix="voice-") as tmp:
        speech = _speak(voice, text, style.stretch, Path(tmp))
        raw = subprocess.run(
            ["sox", "-V1", str(speech), "-t", "raw", "-e", "floating-point", "-b", "32", "-",
             *_effects(style)],
            check=True, capture_output=True, timeout=120,
        ).stdout  # fmt: skip
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def coloured_noise(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Unit-RMS white, pink (1/f) or brown (1/f^2) noise, shaped in the frequency domain."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.maximum(np.fft.rfftfreq(n), 1.0 / n)
    spectrum /= {"white": 1.0, "pink": np.sqrt(f), "brown": f}[kind]
    noise = np.fft.irfft(spectrum, n)
    return noise / max(float(np.sqrt(np.mean(noise**2))), 1e-12)


def render(voice: str, text: str, style: Style) -> tts.Utterance:
    """Synthesise, trim, pad with known silence, set the level, add noise."""
    speech = tts.trim_silence(synthesize(voice, text, style))
    speech = speech * (10 ** (style.peak_dbfs / 20) / float(np.max(np.abs(speech))))
    lead = int(round(style.lead_s * SAMPLE_RATE))
    trail = int(round(style.trail_s * SAMPLE_RATE))
    audio = np.concatenate(
        [np.zeros(lead, np.float32), speech.astype(np.float32), np.zeros(trail, np.float32)]
    )
    if style.noise != "none":
        rms = float(np.sqrt(np.mean(speech.astype(np.float64) ** 2)))
        rng = np.random.default_rng(style.seed)
        noise = coloured_noise(style.noise, audio.size, rng) * rms / 10 ** (style.snr_db / 20)
        audio = audio + noise.astype(np.float32)
    audio = np.clip(audio, -1.0, 32767 / 32768)
    return tts.Utterance(samples=audio, onset_sample=lead, end_sample=lead + speech.size)
