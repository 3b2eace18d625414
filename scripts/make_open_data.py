"""Synthesise the open-vocabulary training set and its held-out test sets.

    python scripts/make_open_data.py --out build/open --train 10000 --seed 0

Sentences are WordNet's everyday usage examples (``sentences.py``); voices are every
English voice of espeak-ng, flite and festival (``voices.py``), each utterance with its own
speed, pitch, level, reverb, band limit and noise. Writes, each with ``wavs/`` and a
``manifest.jsonl`` in the layout of ``make_training_data.py`` (plus ``engine``):

* ``train/``: training voices only, sentences of the test sets never used;
* ``test-heldout-debian/``: held-out sentences spoken by the Debian voices that never
  train (``voices.HELDOUT_DEBIAN``: flite ``rms``, festival ``ked_diphone``);
* ``test-heldout-espeak/``: held-out sentences, espeak-ng's held-out accent and variant;
* ``test-seen/``: held-out sentences spoken by training voices of all three engines;
* ``sentences-neural.txt``: held-out sentences for a neural voice
  (``scripts/neural_tts.py``), which never trains either.

Test audio is spoken plainly (no pitch shift, reverb or noise) at the engine's own pace:
what a user's own recording of these synthesisers sounds like. The output depends only on
the arguments: every random choice is drawn up front from ``--seed``.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sentences  # noqa: E402
import tts  # noqa: E402
import voices  # noqa: E402
from make_training_data import write_split  # noqa: E402

log = logging.getLogger("make_open_data")

TEST_SETS = ("test-heldout-debian", "test-heldout-espeak", "test-seen")


def split_sentences(
    seed: int, per_test: int, n_neural: int
) -> tuple[list[str], dict[str, list[str]], list[str]]:
    """Shuffle the sentences; the first ones go to the test sets, the rest to training."""
    pool = sentences.everyday_sentences()
    order = np.random.default_rng([seed, 1]).permutation(len(pool))
    shuffled = [pool[i] for i in order]
    tests = {name: shuffled[k * per_test : (k + 1) * per_test] for k, name in enumerate(TEST_SETS)}
    start = len(TEST_SETS) * per_test
    neural = shuffled[start : start + n_neural]
    return shuffled[start + n_neural :], tests, neural


def plan_train(
    seed: int, texts: list[str], n: int, random_share: float = 0.0
) -> list[tuple[str, str, voices.Style]]:
    """n utterances cycling through the sentences: an engine by share, a voice, a style.

    A random_share of them instead speak a random word sequence with numbers
    (``tts.random_sentence``): sentences hardly ever say "eighty eight thousand", and word
    lists teach the model to hear each word without leaning on grammar.
    """
    rng = np.random.default_rng([seed, 2])
    engines = list(voices.ENGINE_SHARE)
    shares = list(voices.ENGINE_SHARE.values())
    by_engine = {e: voices.training_voices(e) for e in engines}
    plan = []
    for i in range(n):
        engine = str(rng.choice(engines, p=shares))
        voice = str(rng.choice(by_engine[engine]))
        text = texts[i % len(texts)]
        if random_share and rng.random() < random_share:
            text = tts.random_sentence(rng)
        plan.append((voice, text, voices.random_style(rng)))
    return plan


def plan_test(seed: int, split_id: int, texts: list[str], choices: list[str]):
    """One voice per sentence, taken in turn from choices, spoken plainly."""
    rng = np.random.default_rng([seed, 3, split_id])
    order = rng.permutation(len(choices))
    return [
        (choices[order[i % len(choices)]], text, voices.plain_style())
        for i, text in enumerate(texts)
    ]


def test_voices(name: str) -> list[str]:
    heldout = [v for v in voices.all_voices() if voices.is_heldout(v)]
    if name == "test-heldout-debian":
        return sorted(voices.HELDOUT_DEBIAN)
    if name == "test-heldout-espeak":
        return [v for v in heldout if v.startswith("espeak:")]
    # Seen voices: every flite and festival training voice, and as many espeak-ng ones.
    debian = voices.training_voices("flite") + voices.training_voices("festival")
    espeak = voices.training_voices("espeak")
    step = max(1, len(espeak) // len(debian))
    return debian + espeak[::step][: len(debian)]


def render_row(job: tuple[str, str, tuple[str, str, voices.Style]]) -> dict:
    """Worker: render one utterance, write its wav, return its manifest row."""
    out_dir, rel_path, (voice, text, style) = job
    utt = voices.render(voice, text, style)
    tts.write_audio(os.path.join(out_dir, rel_path), utt.samples)
    sr = tts.SAMPLE_RATE
    return {
        "audio_filepath": rel_path,
        "text": text,
        "duration": round(utt.samples.size / sr, 7),
        "speech_onset_s": round(utt.onset_sample / sr, 7),
        "speech_end_s": round(utt.end_sample / sr, 7),
        "engine": voice.partition(":")[0],
        "voice": voice,
        "seen_voice": not voices.is_heldout(voice),
        "style": style.__dict__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("build/open"))
    parser.add_argument("--train", type=int, default=10000, help="training utterances")
    parser.add_argument("--per-test", type=int, default=150, help="utterances per test set")
    parser.add_argument("--neural", type=int, default=100, help="sentences for a neural voice")
    parser.add_argument(
        "--random-share",
        type=float,
        default=0.0,
        help="share of training utterances that speak random word lists with numbers",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    if min(args.train, args.per_test, args.neural) < 0 or args.jobs < 1:
        parser.error("--train/--per-test/--neural must be >= 0 and --jobs >= 1")
    if not 0.0 <= args.random_share <= 1.0:
        parser.error("--random-share must be between 0 and 1")
    voices.check_tools()
    sentences.check_source()

    train_texts, tests, neural = split_sentences(args.seed, args.per_test, args.neural)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sentences-neural.txt").write_text(
        "".join(t + "\n" for t in neural), encoding="utf-8"
    )
    start = time.monotonic()
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        for split_id, name in enumerate(TEST_SETS if args.per_test else ()):
            plan = plan_test(args.seed, split_id, tests[name], test_voices(name))
            write_split(args.out / name, plan, pool, render_row)
        plan = plan_train(args.seed, train_texts, args.train, args.random_share)
        hours = write_split(args.out / "train", plan, pool, render_row) / 3600
    log.info(
        "done: %d train utterances (%.2f h, %d sentences) in %.0f s",
        args.train, hours, len(train_texts), time.monotonic() - start,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
