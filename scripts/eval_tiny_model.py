#!/usr/bin/env python3
"""Measure a bundled streaming model's WER through the product's own streaming loop.

Why: the figures in ``models/tiny-en/README.md`` must be what a user of ``streamasr`` gets,
not what some other decoding loop or some other scoring gets. So every utterance goes
through ``streamasr.open_model(...).session(...)``, fed from the same file reader in the
same blocks as ``streamasr bench`` (same tail padding, same endpointing), and is scored with
``streamasr.bench.metrics`` (the same normalisation, jiwer edit distance and corpus error
rate as ``streamasr bench``). On the same manifest the two give the same hypotheses and the
same WER.

Reports WER on the held-out synthetic test set overall, for voices seen in training, for
held-out voices, per voice, and on the five LibriVox clips that Debian's
``pocketsphinx-testdata`` installs (real recorded speech, for honesty: the model has never
heard a human voice). ``--utterances FILE`` also writes one JSON line per test utterance
(reference, hypothesis, error counts).

``--head ctc`` evaluates a streaming CTC export (``train_tiny_model.py export --head ctc
--out DIR``); the folder must hold that export alone, since a folder with a transducer
export loads the transducer.

Usage::

    python scripts/eval_tiny_model.py --model-dir models/tiny-en --chunk 16 \\
        --test build/tts/test/manifest.jsonl --json build/train/eval-chunk16.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from streamasr.api import Model, open_model
from streamasr.audio import FileSource
from streamasr.backends.base import EngineOptions
from streamasr.bench.datasets import load_dataset
from streamasr.bench.metrics import ErrorCounts, score, total_counts
from streamasr.errors import DatasetError, StreamAsrError, UsageError

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
EXAMPLES = 8
# "<s> words </s> (utterance-id)": sentence tags and the id are markup, not speech.
_LIBRIVOX_LINE = re.compile(r"^(?P<text>.*?)\s*\((?P<id>[^)]+)\)\s*$")
_SENTENCE_TAGS = re.compile(r"</?s>")


@dataclass(frozen=True)
class Scored:
    """One utterance: what was said, what the loop recognised, and the word errors."""

    id: str
    reference: str
    hypothesis: str
    counts: ErrorCounts
    voice: str = ""
    seen_voice: bool = True


def load_model(model_dir: Path, chunk: int, head: str) -> Model:
    """Open the export for `chunk` the way the CLI does; refuse a folder of the other head.

    A transducer prefers its int8 encoder/joiner (as `streamasr` does by default); a CTC
    export is taken in fp32 when there is one.
    """
    fp32 = head != "transducer" and any(
        ".int8." not in p.name for p in model_dir.glob(f"*chunk-{chunk}-*.onnx")
        if not p.name.startswith(("decoder", "joiner"))
    )  # --fp32 is refused where only int8 files exist
    options = EngineOptions(own={"chunk": chunk, "fp32": fp32})
    model = open_model(str(model_dir), options=options)
    kind = model.info.settings.get("kind", head)
    if kind != head:
        fix = (
            "export the CTC head to a folder of its own (train_tiny_model.py export --head ctc "
            "--out DIR) and pass --model-dir DIR"
            if head == "ctc"
            else "pass --head ctc for a CTC export"
        )
        raise UsageError(f"--head {head}: {model_dir} holds a {kind} export; {fix}")
    return model


def transcribe(model: Model, path: Path) -> str:
    """Stream one file as `streamasr bench` does and return the joined finals."""
    source = FileSource(str(path))
    try:
        session = model.session(source.sample_rate, path.name)
        for block in source.blocks(session.block_s):
            session.feed(block)
        session.finish()
    finally:
        source.close()
    return session.summary().text


def error_rate(counts: Iterable[ErrorCounts]) -> float | None:
    """Corpus WER as a fraction, 4 decimals (bench prints the same figure in percent)."""
    rate = total_counts(counts).rate_pct
    return None if rate is None else round(rate / 100.0, 4)


def evaluate_tts(model: Model, manifest: Path) -> tuple[dict, list[Scored]]:
    """WER of a make_training_data.py test manifest, overall and by voice group."""
    if not manifest.is_file():
        raise DatasetError(
            f"--test {manifest}: no such file; make the test set first (python "
            "scripts/make_training_data.py --out DIR --train 0 --test 200 --seed 1) and pass "
            "DIR/test/manifest.jsonl"
        )
    dataset = load_dataset(manifest, "jsonl")
    skipped = [str(row) for row in dataset.bad_rows] + [
        f"{u.origin}: no audio file {u.audio}" for u in dataset.missing_audio
    ]
    if skipped:
        raise DatasetError(
            f"{manifest}: {len(skipped)} rows cannot be evaluated (first: {skipped[0]}); "
            "fix or remake the manifest so the figure covers the whole test set"
        )
    rows = {}
    for line in manifest.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            rows[manifest.parent / Path(row["audio_filepath"]).expanduser()] = row
    scored = []
    for utt in dataset.utterances:
        row = rows.get(utt.audio, {})
        hypothesis = transcribe(model, utt.audio)
        scored.append(
            Scored(
                utt.id,
                utt.text,
                hypothesis,
                score(utt.text, hypothesis, "wer"),
                str(row.get("voice", "?")),
                bool(row.get("seen_voice", True)),
            )
        )
    groups: dict[str, list[ErrorCounts]] = defaultdict(list)
    for item in scored:
        seen = "seen" if item.seen_voice else "heldout"
        for key in ("all", f"voices:{seen}", f"voice:{item.voice}"):
            groups[key].append(item.counts)
    report = {
        "wer": {k: error_rate(v) for k, v in sorted(groups.items())},
        "utterances": {k: len(v) for k, v in sorted(groups.items())},
        "examples": [
            {"ref": s.reference, "hyp": s.hypothesis, "voice": s.voice} for s in scored[:EXAMPLES]
        ],
    }
    return report, scored


def librivox_utterances(folder: Path) -> list[tuple[str, str]]:
    """(clip id, reference) from pocketsphinx-testdata's `transcription` file."""
    found = []
    for line in (folder / "transcription").read_text(encoding="utf-8").splitlines():
        match = _LIBRIVOX_LINE.match(line)
        if match:
            text = " ".join(_SENTENCE_TAGS.sub(" ", match["text"]).split())
            found.append((match["id"], text))
    return found


def evaluate_librivox(model: Model, folder: Path) -> dict:
    """WER on the real recorded clips (the model has only heard synthetic speech)."""
    counts, examples = [], []
    for clip, reference in librivox_utterances(folder):
        hypothesis = transcribe(model, folder / f"{clip}.wav")
        counts.append(score(reference, hypothesis, "wer"))
        examples.append({"ref": reference, "hyp": hypothesis})
    return {"wer": error_rate(counts), "examples": examples}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-dir", type=Path, default=Path("models/tiny-en"))
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--head", choices=("transducer", "ctc"), default="transducer")
    parser.add_argument("--test", type=Path, default=Path("build/tts/test/manifest.jsonl"))
    parser.add_argument("--librivox", type=Path, default=LIBRIVOX)
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    parser.add_argument(
        "--utterances",
        type=Path,
        default=None,
        help="write one JSON line per test utterance (id, reference, hypothesis, counts)",
    )
    args = parser.parse_args(argv)
    try:
        model = load_model(args.model_dir, args.chunk, args.head)
        report: dict = {"model_dir": str(args.model_dir), "chunk": args.chunk, "head": args.head}
        report["tts_test"], scored = evaluate_tts(model, args.test)
        if (args.librivox / "transcription").exists():
            report["librivox"] = evaluate_librivox(model, args.librivox)
    except StreamAsrError as exc:
        print(f"eval_tiny_model.py: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    if args.utterances is not None:
        args.utterances.parent.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps(asdict(item)) for item in scored]
        args.utterances.write_text("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
