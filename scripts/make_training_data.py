"""Synthesise a training set and a held-out test set of English speech with espeak-ng.

    python scripts/make_training_data.py --out build/tts --train 6000 --test 200 --seed 0

Writes ``<out>/train`` and ``<out>/test``, each with ``wavs/NNNNNN.wav`` (16 kHz mono
16-bit) and ``manifest.jsonl``: one JSON object per utterance with ``audio_filepath``
(relative to the manifest's folder), ``text`` (upper case, exactly what was spoken),
``duration``, ``speech_onset_s``, ``speech_end_s``, ``voice``, ``speed``, ``pitch``,
``seen_voice``, ``peak_dbfs`` and ``snr_db``.

The test sentences never occur in train. Test utterances are half from voices never used
in training (a held-out accent and a held-out variant, see ``tts.HELDOUT_*``) and half from
training voices. The output depends only on the arguments: every random choice is drawn in
the parent process from ``--seed``, so ``--jobs`` does not change a byte. Each manifest is
written as ``manifest.jsonl.partial`` while rows arrive and renamed when the split is done.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tts  # noqa: E402

log = logging.getLogger("make_training_data")


def plan_sentences(seed: int, n_train: int, n_test: int) -> tuple[list[str], list[str]]:
    """Unique test sentences first, then unique train sentences that avoid all of them."""
    rng = np.random.default_rng([seed, 1])
    seen: set[str] = set()

    def draw(n: int) -> list[str]:
        sentences: list[str] = []
        while len(sentences) < n:
            text = tts.random_sentence(rng)
            if text not in seen:
                seen.add(text)
                sentences.append(text)
        return sentences

    test = draw(n_test)
    train = draw(n_train)
    return train, test


def plan_split(
    seed: int, split_id: int, sentences: list[str], heldout_fraction: float
) -> list[tts.UtteranceSpec]:
    """Voice, speed, pitch, silences and noise for each sentence of one split."""
    rng = np.random.default_rng([seed, 2, split_id])
    seen, heldout = tts.seen_voices(), tts.heldout_voices()
    specs = []
    for i, text in enumerate(sentences):
        # Every k-th utterance, not a coin flip, so the held-out share does not vary by seed.
        use_heldout = heldout_fraction > 0 and (i % round(1 / heldout_fraction) == 0)
        specs.append(tts.random_spec(rng, text, heldout if use_heldout else seen))
    return specs


def _render_one(job: tuple[str, str, tts.UtteranceSpec]) -> dict:
    """Worker: render one utterance, write its wav, return its manifest row."""
    out_dir, rel_path, spec = job
    utt = tts.render(spec)
    tts.write_audio(os.path.join(out_dir, rel_path), utt.samples)
    sr = tts.SAMPLE_RATE
    return {
        "audio_filepath": rel_path,
        "text": spec.text,
        "duration": round(utt.samples.size / sr, 7),
        "speech_onset_s": round(utt.onset_sample / sr, 7),
        "speech_end_s": round(utt.end_sample / sr, 7),
        "voice": spec.voice,
        "speed": spec.speed,
        "pitch": spec.pitch,
        "seen_voice": not tts.is_heldout_voice(spec.voice),
        "peak_dbfs": spec.peak_dbfs,
        "snr_db": spec.snr_db,
    }


def write_split(
    out_dir: Path,
    specs: list,
    pool: multiprocessing.pool.Pool,
    worker: Callable[[tuple], dict] = _render_one,
) -> float:
    """Render a split in parallel, writing manifest rows in order as they finish.

    worker turns (out_dir, rel_path, spec) into a written file and its manifest row.
    """
    (out_dir / "wavs").mkdir(parents=True, exist_ok=True)
    partial = out_dir / "manifest.jsonl.partial"
    jobs = [(str(out_dir), f"wavs/{i:06d}.wav", spec) for i, spec in enumerate(specs)]
    total_s = 0.0
    start = time.monotonic()
    with partial.open("w", encoding="utf-8") as f:
        for i, row in enumerate(pool.imap(worker, jobs, chunksize=4), start=1):
            f.write(json.dumps(row) + "\n")
            f.flush()
            total_s += row["duration"]
            if i % 500 == 0 or i == len(jobs):
                log.info(
                    "%s: %d/%d utterances, %.2f h audio, %.0f s",
                    out_dir,
                    i,
                    len(jobs),
                    total_s / 3600,
                    time.monotonic() - start,
                )
    os.replace(partial, out_dir / "manifest.jsonl")
    return total_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("build/tts"))
    parser.add_argument("--train", type=int, default=6000, help="training utterances")
    parser.add_argument("--test", type=int, default=200, help="test utterances")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--heldout-fraction",
        type=float,
        default=0.5,
        help="share of test utterances from held-out voices",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    if args.train < 0 or args.test < 0 or args.jobs < 1:
        parser.error("--train/--test must be >= 0 and --jobs >= 1")
    if not 0 <= args.heldout_fraction <= 1:
        parser.error("--heldout-fraction must be between 0 and 1")
    tts.check_tools()

    train, test = plan_sentences(args.seed, args.train, args.test)
    test_specs = plan_split(args.seed, 1, test, args.heldout_fraction)
    train_specs = plan_split(args.seed, 0, train, 0.0)
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        # Test first: it is small, and a partial train manifest stays usable meanwhile.
        test_s = write_split(args.out / "test", test_specs, pool)
        train_s = write_split(args.out / "train", train_specs, pool)
    log.info(
        "done: train %d utts %.2f h, test %d utts %.2f h",
        len(train),
        train_s / 3600,
        len(test),
        test_s / 3600,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
