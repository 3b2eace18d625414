"""Synthesise a small benchmark set for `streamasr bench`, in three dataset layouts.

    python scripts/make_dataset.py --out build/dataset --n 20 --seed 0

Every utterance has an exact transcript and a known speech onset and end (we add the
silence around espeak-ng's speech ourselves). The same audio is written three ways, each
layout self-contained so each dataset reader can be tested on its own:

- ``<out>/librispeech/<spk>/<chapter>/<spk>-<chapter>-<utt>.flac`` with
  ``<spk>-<chapter>.trans.txt`` lines ``ID TEXT`` (the LibriSpeech layout);
- ``<out>/kaldi/`` with ``wav.scp`` (``ID wavs/ID.wav``, paths relative to the ``kaldi``
  folder), ``text``, ``utt2dur``, ``utt2spk``, ``spk2utt`` (all sorted by ID, as Kaldi wants);
- ``<out>/manifest.jsonl`` with ``audio_filepath`` (relative to ``<out>``), ``text``,
  ``duration``, ``speech_onset_s``, ``speech_end_s`` and the voice settings.

A speaker is one espeak-ng voice. The output depends only on ``--n`` and ``--seed``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tts  # noqa: E402

log = logging.getLogger("make_dataset")

CHAPTER = 1
# Benchmark sentences have 5+ words, which keeps them (almost surely) out of any training set
# drawn by make_training_data.py, whose short sentences are the only likely collisions.
MIN_WORDS, MAX_WORDS = 5, 12


def plan(n: int, seed: int) -> list[tts.UtteranceSpec]:
    """Unique sentences over all voices, seen and held-out, at varied speed and pitch."""
    rng = np.random.default_rng([seed, 3])
    voices = tts.seen_voices() + tts.heldout_voices()
    texts: list[str] = []
    while len(texts) < n:
        text = tts.random_sentence(rng, MIN_WORDS, MAX_WORDS)
        if text not in texts:
            texts.append(text)
    return [tts.random_spec(rng, text, voices, lead_range=(0.3, 1.0)) for text in texts]


def speaker_id(voice: str) -> int:
    """A stable numeric LibriSpeech-style speaker id for a voice."""
    all_voices = [tts.voice_name(b, v) for b in tts.BASE_VOICES for v in tts.VARIANTS]
    return 100 + all_voices.index(voice)


def write_dataset(out: Path, specs: list[tts.UtteranceSpec]) -> float:
    """Render each utterance once and write it in all three layouts; return total seconds."""
    sr = tts.SAMPLE_RATE
    per_chapter: dict[Path, list[str]] = defaultdict(list)
    utts_of_spk: dict[int, int] = defaultdict(int)
    kaldi = out / "kaldi"
    (kaldi / "wavs").mkdir(parents=True, exist_ok=True)
    (out / "wavs").mkdir(parents=True, exist_ok=True)
    kaldi_rows: list[tuple[str, str, float, int]] = []
    total_s = 0.0
    with (out / "manifest.jsonl").open("w", encoding="utf-8") as manifest:
        for spec in specs:
            spk = speaker_id(spec.voice)
            utt_id = f"{spk}-{CHAPTER}-{utts_of_spk[spk]:04d}"
            utts_of_spk[spk] += 1
            utt = tts.render(spec)
            duration = utt.samples.size / sr
            total_s += duration

            chapter_dir = out / "librispeech" / str(spk) / str(CHAPTER)
            chapter_dir.mkdir(parents=True, exist_ok=True)
            tts.write_audio(str(chapter_dir / f"{utt_id}.flac"), utt.samples)
            per_chapter[chapter_dir / f"{spk}-{CHAPTER}.trans.txt"].append(f"{utt_id} {spec.text}")

            tts.write_audio(str(kaldi / "wavs" / f"{utt_id}.wav"), utt.samples)
            kaldi_rows.append((utt_id, spec.text, duration, spk))

            tts.write_audio(str(out / "wavs" / f"{utt_id}.wav"), utt.samples)
            row = {
                "audio_filepath": f"wavs/{utt_id}.wav",
                "text": spec.text,
                "duration": round(duration, 7),
                "speech_onset_s": round(utt.onset_sample / sr, 7),
                "speech_end_s": round(utt.end_sample / sr, 7),
                "id": utt_id,
                "voice": spec.voice,
                "speed": spec.speed,
                "pitch": spec.pitch,
                "seen_voice": not tts.is_heldout_voice(spec.voice),
            }
            manifest.write(json.dumps(row) + "\n")

    for path, lines in per_chapter.items():
        path.write_text("".join(line + "\n" for line in sorted(lines)), encoding="utf-8")
    kaldi_rows.sort()
    spk2utt: dict[str, list[str]] = defaultdict(list)
    for utt_id, _, _, spk in kaldi_rows:
        spk2utt[str(spk)].append(utt_id)
    files = {
        "wav.scp": [f"{u} wavs/{u}.wav" for u, *_ in kaldi_rows],
        "text": [f"{u} {text}" for u, text, _, _ in kaldi_rows],
        "utt2dur": [f"{u} {dur:.7f}" for u, _, dur, _ in kaldi_rows],
        "utt2spk": [f"{u} {spk}" for u, _, _, spk in kaldi_rows],
        "spk2utt": [f"{spk} {' '.join(utts)}" for spk, utts in sorted(spk2utt.items())],
    }
    for name, lines in files.items():
        (kaldi / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return total_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("build/dataset"),
        help="folder to write the three layouts into (librispeech/, kaldi/, manifest.jsonl)",
    )
    parser.add_argument(
        "--n", type=int, default=20, help="number of utterances (each a different sentence)"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="random seed for sentences, voices and silences; the same --n and --seed give "
        "the same dataset",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    if args.n < 1:
        parser.error("--n must be >= 1")
    tts.check_tools()
    total_s = write_dataset(args.out, plan(args.n, args.seed))
    log.info("%s: %d utterances, %.1f s of audio", args.out, args.n, total_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
