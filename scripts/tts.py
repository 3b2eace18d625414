"""Shared helpers that synthesise English speech with exact transcripts (espeak-ng + sox).

Why synthetic speech: no recorded corpus can be downloaded here, and a synthesiser gives
what recordings never do: the exact words spoken and the exact sample where speech starts
and ends, because we add the silence around it ourselves.

Used by ``make_training_data.py`` (training / held-out test sets) and ``make_dataset.py``
(a small benchmark set in LibriSpeech, Kaldi and JSONL layouts). Run as scripts from the
repository root; they import this module from their own directory.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

import numpy as np

SAMPLE_RATE = 16000

# Accents of espeak-ng's own (non-mbrola) English voices.
BASE_VOICES: tuple[str, ...] = (
    "en-us",
    "en-gb",
    "en-gb-scotland",
    "en-gb-x-rp",
    "en-gb-x-gbclan",
    "en-gb-x-gbcwmd",
    "en-us-nyc",
    "en-029",
)
# Voice variants (files under espeak-ng-data/voices/!v) that stay intelligible.
VARIANTS: tuple[str, ...] = (
    "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8",
    "f1", "f2", "f3", "f4", "f5",
    "klatt", "klatt2", "klatt3", "klatt4",
    "Andy", "Annie", "david", "john", "linda", "max", "steph", "paul", "rob",
    "edward", "michel", "norbert", "quincy", "belinda", "shelby", "aunty",
    "grandma", "grandpa",
)  # fmt: skip
# Never used for training: one whole accent and one whole variant, so a test set can
# measure how a model trained on the rest copes with a voice it has never heard.
HELDOUT_BASES: frozenset[str] = frozenset({"en-029"})
HELDOUT_VARIANTS: frozenset[str] = frozenset({"f5"})

SPEED_RANGE = (130, 200)  # espeak-ng -s, words per minute
PITCH_RANGE = (30, 70)  # espeak-ng -p, 0..99

# Sentences are random word sequences, so nothing but the sound could choose between two
# spellings of one pronunciation: "TO" / "TOO" / "TWO" can only be guessed. One spelling of
# each such set stays (TWO and FOUR are needed by the numbers); these are left out.
HOMOPHONES_DROPPED: frozenset[str] = frozenset(
    "to too for knew write hear hour know buy their it's eye".split()
)
# A few hundred common words; transcripts use exactly these spellings, upper-cased.
VOCABULARY: tuple[str, ...] = tuple(
    word
    for word in """
    the a an and or but if then so because of to in on at by for with from up down out
    over under into about after before again all any some many much more most few other
    such only own same than too very just now here there when where why how what which
    who this that these those i you he she it we they me him her us them my your his its
    our their mine yours be is are was were been being have has had do does did will would
    can could should may might must shall not no yes don't can't won't it's i'm that's
    let's we're you're didn't isn't go goes went gone come came get got make made take
    took give gave see saw look find found think thought know knew tell told say said ask
    work call try need feel leave put keep let begin help show hear play run move live
    believe bring happen write sit stand lose pay meet include continue set learn change
    lead understand watch follow stop create speak read spend grow open walk win offer
    remember love consider appear buy wait serve die send expect build stay fall cut reach
    kill remain time year people way day man woman child world life hand part place case
    week company system program question government number night point home water room
    mother father area money story fact month lot right study book eye job word business
    issue side kind head house service friend power hour game line end member law car city
    community name president team minute idea kid body information back parent face others
    level office door health person art war history party result morning reason research
    girl guy moment air teacher force education food music river town street garden table
    window paper letter train road dog cat bird tree rain snow sun moon good new first last
    long great little old big high different small large next early young important public
    bad able late hard major better best free sure clear whole real true full special easy
    strong possible low dark happy cold warm green red blue white black quiet quickly slowly
    always never often sometimes today tomorrow yesterday together almost already also
    """.split()
    if word not in HOMOPHONES_DROPPED
)

_ONES = (
    "ZERO ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE TEN ELEVEN TWELVE THIRTEEN "
    "FOURTEEN FIFTEEN SIXTEEN SEVENTEEN EIGHTEEN NINETEEN"
).split()
_TENS = "_ _ TWENTY THIRTY FORTY FIFTY SIXTY SEVENTY EIGHTY NINETY".split()


def spoken_words() -> list[str]:
    """Every word a sentence can contain: the vocabulary and the number words, lower case."""
    numbers = {w.lower() for w in _ONES + _TENS[2:] + ["HUNDRED", "THOUSAND"]}
    return sorted(set(VOCABULARY) | numbers)


def number_to_words(n: int) -> list[str]:
    """Spell 0 <= n < 1,000,000 as American English words ("TWO THOUSAND FIFTEEN").

    Numbers are spelled here, not by espeak, so the transcript is exactly what is spoken.
    """
    if not 0 <= n < 1_000_000:
        raise ValueError(f"number_to_words supports 0..999999, got {n}")
    if n < 20:
        return [_ONES[n]]
    if n < 100:
        tens, ones = divmod(n, 10)
        return [_TENS[tens]] + ([_ONES[ones]] if ones else [])
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return [_ONES[hundreds], "HUNDRED"] + (number_to_words(rest) if rest else [])
    thousands, rest = divmod(n, 1000)
    return number_to_words(thousands) + ["THOUSAND"] + (number_to_words(rest) if rest else [])


def _number_phrase(rng: np.random.Generator) -> list[str]:
    """A number as people say it: a small count, a year-like value, or a digit string."""
    kind = rng.integers(0, 4)
    if kind == 0:
        return number_to_words(int(rng.integers(0, 20)))
    if kind == 1:
        return number_to_words(int(rng.integers(20, 1000)))
    if kind == 2:
        return number_to_words(int(rng.integers(1000, 100_000)))
    return [_ONES[int(d)] for d in rng.integers(0, 10, size=int(rng.integers(2, 5)))]


def random_sentence(rng: np.random.Generator, min_words: int = 3, max_words: int = 12) -> str:
    """An upper-case transcript of min_words..max_words words (A-Z, apostrophe, spaces)."""
    target = int(rng.integers(min_words, max_words + 1))
    number = _number_phrase(rng) if rng.random() < 0.3 else []
    if len(number) > target:
        number = []
    words = [str(w).upper() for w in rng.choice(VOCABULARY, size=target - len(number))]
    # The number stays one contiguous phrase, so the words around it cannot split it.
    at = int(rng.integers(0, len(words) + 1))
    return " ".join(words[:at] + number + words[at:])


def voice_name(base: str, variant: str) -> str:
    """The espeak-ng -v argument for an accent and a variant."""
    return f"{base}+{variant}"


def is_heldout_voice(voice: str) -> bool:
    """True for voices never used in training (held-out accent or held-out variant)."""
    base, _, variant = voice.partition("+")
    return base in HELDOUT_BASES or variant in HELDOUT_VARIANTS


def seen_voices() -> list[str]:
    """Every accent+variant combination that training may use."""
    return [
        voice_name(b, v)
        for b in BASE_VOICES
        for v in VARIANTS
        if not is_heldout_voice(voice_name(b, v))
    ]


def heldout_voices() -> list[str]:
    """Every accent+variant combination kept out of training."""
    return [
        voice_name(b, v)
        for b in BASE_VOICES
        for v in VARIANTS
        if is_heldout_voice(voice_name(b, v))
    ]


def check_tools() -> None:
    """Fail early, with the fix, when espeak-ng or sox is missing."""
    missing = [tool for tool in ("espeak-ng", "sox") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(
            f"missing {', '.join(missing)}: install with `apt-get install espeak-ng sox`"
        )


def synthesize(text: str, voice: str, speed: int, pitch: int) -> np.ndarray:
    """Speak text with espeak-ng; return float32 mono samples at 16 kHz.

    espeak-ng writes 22.05 kHz; sox resamples (float output, so no dither and the result
    is deterministic).
    """
    wav = subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", text.lower()],
        check=True,
        capture_output=True,
    ).stdout
    raw = subprocess.run(
        ["sox", "-t", "wav", "-", "-t", "raw", "-r", str(SAMPLE_RATE), "-e", "floating-point",
         "-b", "32", "-c", "1", "-"],
        input=wav,
        check=True,
        capture_output=True,
    ).stdout  # fmt: skip
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def trim_silence(samples: np.ndarray, rel_threshold: float = 0.005) -> np.ndarray:
    """Cut espeak-ng's own leading/trailing silence (it adds ~10 ms before, ~350 ms after).

    The first/last sample above rel_threshold * peak marks speech, so after trimming the
    speech onset is sample 0 and the silence we add later is the whole leading silence.
    """
    peak = float(np.max(np.abs(samples))) if samples.size else 0.0
    if peak == 0.0:
        raise ValueError("espeak-ng produced silence")
    loud = np.flatnonzero(np.abs(samples) > rel_threshold * peak)
    return samples[loud[0] : loud[-1] + 1]


@dataclass(frozen=True)
class UtteranceSpec:
    """Everything that decides one utterance's audio, chosen up front from the seed."""

    text: str
    voice: str
    speed: int
    pitch: int
    lead_s: float  # silence before speech
    trail_s: float  # silence after speech
    peak_dbfs: float  # loudness: the speech peak level
    snr_db: float | None  # white noise level against the speech RMS; None = no noise
    noise_seed: int


@dataclass(frozen=True)
class Utterance:
    """Rendered audio and where speech lies in it, in samples at SAMPLE_RATE."""

    samples: np.ndarray
    onset_sample: int
    end_sample: int


def random_spec(
    rng: np.random.Generator,
    text: str,
    voices: list[str],
    lead_range: tuple[float, float] = (0.2, 1.0),
    noise_prob: float = 0.7,
) -> UtteranceSpec:
    """Draw voice, speed, pitch, silences, gain and noise for one utterance."""
    return UtteranceSpec(
        text=text,
        voice=str(rng.choice(voices)),
        speed=int(rng.integers(SPEED_RANGE[0], SPEED_RANGE[1] + 1)),
        pitch=int(rng.integers(PITCH_RANGE[0], PITCH_RANGE[1] + 1)),
        lead_s=round(float(rng.uniform(*lead_range)), 3),
        trail_s=round(float(rng.uniform(*lead_range)), 3),
        peak_dbfs=round(float(rng.uniform(-14.0, -1.0)), 2),
        snr_db=round(float(rng.uniform(15.0, 40.0)), 1) if rng.random() < noise_prob else None,
        noise_seed=int(rng.integers(0, 2**31 - 1)),
    )


def render(spec: UtteranceSpec) -> Utterance:
    """Synthesise, trim, pad with known silence, set the level, add mild noise."""
    speech = trim_silence(synthesize(spec.text, spec.voice, spec.speed, spec.pitch))
    speech = speech * (10 ** (spec.peak_dbfs / 20) / float(np.max(np.abs(speech))))
    lead = int(round(spec.lead_s * SAMPLE_RATE))
    trail = int(round(spec.trail_s * SAMPLE_RATE))
    audio = np.concatenate(
        [np.zeros(lead, np.float32), speech.astype(np.float32), np.zeros(trail, np.float32)]
    )
    if spec.snr_db is not None:
        rms = float(np.sqrt(np.mean(speech.astype(np.float64) ** 2)))
        noise_rms = rms / 10 ** (spec.snr_db / 20)
        noise = np.random.default_rng(spec.noise_seed).standard_normal(audio.size)
        audio = audio + (noise * noise_rms).astype(np.float32)
    audio = np.clip(audio, -1.0, 32767 / 32768)
    return Utterance(samples=audio, onset_sample=lead, end_sample=lead + speech.size)


def write_audio(path: str, samples: np.ndarray) -> None:
    """Write 16 kHz mono 16-bit PCM, WAV or FLAC by the file's extension.

    Samples are rounded, not truncated, to 16 bits, so the bytes are reproducible.
    """
    import soundfile as sf

    pcm = np.round(samples * 32768.0).clip(-32768, 32767).astype("<i2")
    sf.write(path, pcm, SAMPLE_RATE, subtype="PCM_16")
