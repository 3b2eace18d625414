"""Measure the voice activity detectors: onset error, the gate's compute and WER, time to final.

Run from the repository root (needs espeak-ng and sox, as scripts/test.sh installs):

    python scripts/vad_report.py --out build/vad_report.md

1. Onset error. Synthetic speech (espeak-ng voices, scripts/tts.py) is placed at a known
   sample after 1-2 s of noise: pink, brown, or babble made of other utterances, at SNRs from
   30 to 0 dB (speech RMS over noise RMS). The first speech start each detector reports is
   compared with the known onset: median and p90 of |error|, how often it started more than
   250 ms early (set off by the noise, an error a first-token latency inherits) or not at all.
   The same for the five real LibriVox recordings of Debian's pocketsphinx-testdata,
   against onsets marked by hand (HAND_ONSETS).
2. The gate. One long file of utterances with 30-50 % silence between them, under pink
   noise at 20 dB SNR, streamed through the bundled tiny-en model without and with
   --vad-gate: compute, RTF, audio skipped, WER against the known words.
3. Time to final after the last word: rule 2 alone against the VAD end rule (audio time
   of the final minus the known end of speech).
4. The detectors' own cost per hour of audio, beside the recogniser's.

Timings are CPU seconds of this process (a shared machine inflates wall-clock times, less
so CPU time); read them as ratios, with the CPU model and load recorded in the report.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import tts  # noqa: E402  (scripts/tts.py)

from streamasr.backends.base import EndpointOptions, EngineOptions  # noqa: E402
from streamasr.backends.sherpa.engine import SherpaRecognizer  # noqa: E402
from streamasr.backends.sherpa.modeldir import resolve_model  # noqa: E402
from streamasr.session.events import Final  # noqa: E402
from streamasr.session.stream import StreamOptions, StreamSession  # noqa: E402
from streamasr.vad import VadFrontEnd, VadOptions  # noqa: E402

RATE = tts.SAMPLE_RATE
SNRS_DB = (30, 20, 10, 5, 0)
NOISES = ("pink", "brown", "babble")
DETECTORS = ("energy", "silero")
BLOCK_S = 0.32
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")  # Debian pocketsphinx-testdata
# Speech onsets of those recordings marked by hand on waveform plots (10 ms grid, 0.18-0.36 s):
# the first visible sound of the first word, /h/ frication included, a breath before a vowel
# not. Clip: (seconds, first word).
HAND_ONSETS = {
    "sense_and_sensibility_01_austen_64kb-0870": (0.250, "and"),
    "sense_and_sensibility_01_austen_64kb-0880": (0.275, "he"),
    "sense_and_sensibility_01_austen_64kb-0890": (0.288, "unless"),
    "sense_and_sensibility_01_austen_64kb-0920": (0.267, "had"),
    "sense_and_sensibility_01_austen_64kb-0930": (0.280, "he"),
}
EARLY_S = 0.25


@dataclass(frozen=True)
class Speech:
    samples: np.ndarray  # trimmed: speech from the first to the last sample
    text: str


def make_speech(count: int, rng: np.random.Generator) -> list[Speech]:
    voices = tts.seen_voices() + tts.heldout_voices()
    out = []
    for _ in range(count):
        text = tts.random_sentence(rng, 4, 12)
        spec = tts.random_spec(rng, text, voices)
        samples = tts.trim_silence(tts.synthesize(text, spec.voice, spec.speed, spec.pitch))
        level = 10 ** (float(rng.uniform(-14.0, -3.0)) / 20)
        out.append(Speech((samples * level / np.max(np.abs(samples))).astype(np.float32), text))
    return out


def coloured(n: int, rng: np.random.Generator, power: float) -> np.ndarray:
    """Noise whose power falls as 1/f**power (1 pink, 2 brown) above 20 Hz, unit RMS.

    Below 20 Hz is cut, as a microphone's high-pass would: it is inaudible, and brown noise
    would otherwise be mostly a slow drift of the level."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1 / RATE)
    shaped = np.where(freqs >= 20.0, spectrum / np.maximum(freqs, 20.0) ** (power / 2), 0)
    noise = np.fft.irfft(shaped, n)
    return (noise / np.sqrt(np.mean(noise**2))).astype(np.float32)


def babble(n: int, rng: np.random.Generator, voices: list[Speech]) -> np.ndarray:
    """Five talkers at once, each looping other utterances from a random offset; unit RMS."""
    total = np.zeros(n, np.float64)
    for _ in range(5):
        talk = np.concatenate([voices[int(i)].samples for i in rng.permutation(len(voices))])
        talk = np.tile(talk, n // len(talk) + 2)
        start = int(rng.integers(0, len(talk) - n))
        total += talk[start : start + n] / np.sqrt(np.mean(talk**2))
    return (total / np.sqrt(np.mean(total**2))).astype(np.float32)


def noise_of(kind: str, n: int, rng: np.random.Generator, voices: list[Speech]) -> np.ndarray:
    if kind == "pink":
        return coloured(n, rng, 1.0)
    if kind == "brown":
        return coloured(n, rng, 2.0)
    return babble(n, rng, voices)


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


def mix(speech: np.ndarray, noise: np.ndarray, at: int, snr_db: float) -> np.ndarray:
    audio = noise * (rms(speech) / 10 ** (snr_db / 20))
    audio[at : at + len(speech)] += speech
    return np.clip(audio, -1.0, 1.0).astype(np.float32)


def first_start(detector: str, audio: np.ndarray) -> float | None:
    front = VadFrontEnd(VadOptions(detector=detector), RATE)
    step = int(BLOCK_S * RATE)
    for i in range(0, len(audio), step):
        front.accept(audio[i : i + step])
    starts = front.detector.track.starts
    return starts[0] if starts else None


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def onset_table(speech: list[Speech], babble_voices: list[Speech], seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    errors: dict[tuple[str, str, int], list[float]] = {}
    misses: dict[tuple[str, str, int], int] = {}
    for kind in NOISES:
        for utt in speech:
            lead = int(rng.uniform(1.0, 2.0) * RATE)
            n = lead + len(utt.samples) + RATE
            noise = noise_of(kind, n, rng, babble_voices)
            for snr in SNRS_DB:
                audio = mix(utt.samples, noise.copy(), lead, snr)
                truth = lead / RATE
                for det in DETECTORS:
                    key = (kind, det, snr)
                    start = first_start(det, audio)
                    if start is None:
                        misses[key] = misses.get(key, 0) + 1
                        continue
                    errors.setdefault(key, []).append(start - truth)
    lines = [
        f"Absolute onset error in ms over {len(speech)} utterances per row; *early*: the "
        f"first start came more than {EARLY_S * 1000:.0f} ms before the speech (set off by "
        "the noise); *none*: no start at all.",
        "",
        "| noise | SNR dB | energy median | energy p90 | energy early/none | "
        "silero median | silero p90 | silero early/none |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in NOISES:
        for snr in SNRS_DB:
            cells = [kind, str(snr)]
            for det in DETECTORS:
                errs = errors.get((kind, det, snr), [])
                size = [abs(e) for e in errs]
                early = sum(e < -EARLY_S for e in errs)
                median, p90 = percentile(size, 50) * 1000, percentile(size, 90) * 1000
                none = misses.get((kind, det, snr), 0)
                cells += [f"{median:.0f}", f"{p90:.0f}", f"{early}/{none}"]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def recorded_table() -> list[str]:
    """The real LibriVox recordings: each detector's first start against the hand mark."""
    import soundfile as sf

    if not LIBRIVOX.is_dir():
        return [f"{LIBRIVOX} is missing: `apt-get install pocketsphinx-testdata`."]
    lines = ["| recording | first word | hand mark s | energy error ms | silero error ms |",
             "|---|---|---:|---:|---:|"]
    for clip, (mark, word) in HAND_ONSETS.items():
        audio, rate = sf.read(str(LIBRIVOX / f"{clip}.wav"), dtype="float32")
        assert rate == RATE
        cells = [clip.rsplit("-", 1)[-1], word, f"{mark:.3f}"]
        for det in DETECTORS:
            start = first_start(det, audio)
            cells.append("none" if start is None else f"{(start - mark) * 1000:+.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def stream(rec: SherpaRecognizer, audio: np.ndarray, vad: VadOptions, repeat: int = 1):
    """Events, summary and the CPU seconds of this process for the stream (the least of
    `repeat` runs). CPU time, not wall time: on a shared machine a wall clock also counts
    the time other processes held the CPU (the engine runs on one thread)."""
    best = None
    for _ in range(repeat):
        options = StreamOptions(block_s=BLOCK_S, vad=vad, endpoint=EndpointOptions())
        session = StreamSession(rec, RATE, "report", options)
        step = int(BLOCK_S * RATE)
        started = time.process_time()
        events = list(session.run(audio[i : i + step] for i in range(0, len(audio), step)))
        cpu_s = time.process_time() - started
        if best is None or cpu_s < best[2]:
            best = (events, session.summary(), cpu_s)
    assert best is not None
    return best


def gate_table(rec: SherpaRecognizer, speech: list[Speech], seed: int) -> list[str]:
    import jiwer

    rng = np.random.default_rng(seed)
    parts, words = [], []
    for utt in speech:
        speech_s = len(utt.samples) / RATE
        gap = speech_s * float(rng.uniform(0.5, 1.0))  # ~35-50 % of the file is silence
        parts += [np.zeros(int(gap * RATE), np.float32), utt.samples]
        words.append(utt.text)
    parts.append(np.zeros(RATE, np.float32))
    clean = np.concatenate(parts)
    silence = float(np.mean(np.abs(clean) < 1e-6))
    noise = coloured(len(clean), rng, 1.0)
    speech_rms = rms(np.concatenate([u.samples for u in speech]))
    audio = np.clip(clean + noise * speech_rms / 10, -1, 1).astype(np.float32)  # 20 dB SNR
    reference = " ".join(words)
    rows = [
        ("energy onsets (default), no gate", VadOptions()),
        ("silero onsets, no gate", VadOptions(detector="silero")),
        ("energy --vad-gate", VadOptions(detector="energy", gate=True)),
        ("silero --vad-gate", VadOptions(detector="silero", gate=True)),
    ]
    lines = [
        f"Long file: {len(audio) / RATE:.0f} s, {silence * 100:.0f} % silence between "
        f"{len(speech)} utterances, pink noise at 20 dB SNR.",
        "",
        "| run | CPU s | CPU s per audio s | CPU vs no gate | audio skipped s | WER % | finals |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    base = None
    for name, vad in rows:
        events, summary, cpu_s = stream(rec, audio, vad, repeat=3)
        base = base or cpu_s
        wer = jiwer.wer(reference, summary.text or "-") * 100
        finals = sum(isinstance(e, Final) for e in events)
        lines.append(
            f"| {name} | {cpu_s:.2f} | {cpu_s / summary.audio_s:.3f} | "
            f"{cpu_s / base:.2f}x | {summary.skipped_s:.1f} | {wer:.1f} | {finals} |"
        )
    return lines


def final_table(rec: SherpaRecognizer, speech: list[Speech], seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    rows = [
        ("rule 2 alone (1.2 s)", VadOptions()),
        ("energy --vad-end", VadOptions(detector="energy", end_rule=True)),
        ("silero --vad-end", VadOptions(detector="silero", end_rule=True)),
    ]
    waits: dict[str, list[float]] = {name: [] for name, _ in rows}
    for utt in speech:
        lead = RATE
        n = lead + len(utt.samples) + 3 * RATE
        noise = coloured(n, rng, 1.0)
        audio = mix(utt.samples, noise, lead, 30)
        end_s = (lead + len(utt.samples)) / RATE
        for name, vad in rows:
            events, _, _ = stream(rec, audio, vad)
            finals = [e for e in events if isinstance(e, Final)]
            if finals:
                waits[name].append(finals[-1].audio_s - end_s)
    lines = [
        "| endpoint | median s | p90 s | utterances with a final |",
        "|---|---:|---:|---:|",
    ]
    for name, _ in rows:
        w = waits[name]
        lines.append(f"| {name} | {percentile(w, 50):.2f} | {percentile(w, 90):.2f} | "
                     f"{len(w)}/{len(speech)} |")
    return lines


def cost_table(rec: SherpaRecognizer, speech: list[Speech]) -> list[str]:
    audio = np.concatenate([np.concatenate([np.zeros(RATE // 2, np.float32), u.samples])
                            for u in speech])
    hours = len(audio) / RATE / 3600
    lines = ["| part | CPU s per hour of audio | share of the recogniser |",
             "|---|---:|---:|"]
    _, _, cpu_s = stream(rec, audio, VadOptions(detector="off"), repeat=2)
    recogniser = cpu_s / hours
    for det in DETECTORS:
        best = float("inf")
        for _ in range(2):
            started = time.process_time()
            first_start(det, audio)
            best = min(best, time.process_time() - started)
        lines.append(f"| {det} detector | {best / hours:.0f} | {best / hours / recogniser:.2f} |")
    lines.append(f"| tiny-en recogniser | {recogniser:.0f} | 1.00 |")
    return lines


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{model}, {os.cpu_count()} CPUs, load average {load}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--utterances", type=int, default=12, help="per noise and SNR")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, help="write the report (markdown) here too")
    args = parser.parse_args()
    tts.check_tools()
    rng = np.random.default_rng(args.seed)
    speech = make_speech(args.utterances, rng)
    babble_voices = make_speech(10, rng)
    rec = SherpaRecognizer(resolve_model(str(ROOT / "models" / "tiny-en"), None), EngineOptions())
    report = [f"Machine at the start: {machine()}.", ""]
    sections = [
        ("Onset error against the known onset", lambda: onset_table(speech, babble_voices,
                                                                    args.seed)),
        ("Onset error on real recordings (LibriVox, marked by hand)", recorded_table),
        ("The gate on a long file", lambda: gate_table(rec, speech, args.seed)),
        ("Time to final after the last word", lambda: final_table(rec, speech, args.seed)),
        ("Cost per hour of audio", lambda: cost_table(rec, speech)),
    ]
    for title, section in sections:
        started = time.perf_counter()
        lines = section()
        report += [f"### {title}", "", *lines, ""]
        print(f"{title}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    report.append(f"Machine at the end: {machine()}.")
    text = "\n".join(report) + "\n"
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
