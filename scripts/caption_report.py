"""Check the caption rules on a long mixed recording: cues, durations, reading speed, orphans.

Run from the repository root (needs espeak-ng and sox, as scripts/test.sh installs):

    python scripts/caption_report.py --out build/caption_report

1. Builds about ten minutes of audio (`--minutes`): the bundled clips (models/*/test_wavs)
   and espeak-ng paragraphs of 2-6 everyday sentences (scripts/sentences.py, WordNet usage
   examples; random words if WordNet is missing) at 140-200 words per minute, with 1-5 s of
   silence between any two, joined with sox.
2. Runs `streamasr file MIXED.wav -o OUT --format srt,jsonl` in a fresh process (the JSONL
   says which words each utterance had).
3. Reads the SRT back and reports: cues, the shortest cue, cues under the minimum duration
   and over the reading speed (and of those, how many had silence left to extend into before
   the next cue: the rules should leave none), orphan cues (fewer than 3 words in an
   utterance that had 3 or more), and whether the SRT's words are the JSONL's.

The cue rules are the defaults of `streamasr file` (docs/file.md, Captions); --max-cps and
--min-s pass other limits to it (--cue-max-cps, --cue-min-s) and are what the cues are held to.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import tts  # noqa: E402  (scripts/tts.py)

from streamasr.text.captions import MAX_CPS, MAX_CUE_S, MIN_CUE_S, MIN_CUE_WORDS  # noqa: E402
from streamasr.text.tokens import split_words  # noqa: E402

ROOM_S = 0.05  # silence left after a cue that counts as room it could have used


@dataclass(frozen=True)
class SrtCue:
    start_s: float
    end_s: float
    lines: tuple[str, ...]

    @property
    def cps(self) -> float:
        duration = self.end_s - self.start_s
        chars = sum(len(line) for line in self.lines)
        return chars / duration if duration > 0 else float("inf")


def paragraphs(rng: np.random.Generator) -> list[str]:
    """Sentences to speak, a paragraph at a time."""
    try:
        import sentences

        sentences.check_source()
        pool = sentences.everyday_sentences()
    except SystemExit:
        pool = [tts.random_sentence(rng) for _ in range(2000)]
    out = []
    for _ in range(400):
        picked = rng.choice(len(pool), size=int(rng.integers(2, 7)), replace=False)
        out.append(". ".join(pool[i].lower() for i in picked) + ".")
    return out


def build_audio(path: Path, minutes: float, seed: int, work: Path) -> tuple[float, int, int]:
    """The mixed recording; (seconds, clips used, paragraphs spoken)."""
    rng = np.random.default_rng(seed)
    clips = sorted(ROOT.glob("models/*/test_wavs/*.wav"))
    texts = paragraphs(rng)
    parts: list[Path] = []
    total_s, used_clips, spoken = 0.0, 0, 0
    index = 0
    while total_s < minutes * 60:
        gap_s = float(rng.uniform(1.0, 5.0))
        gap = work / f"gap{index}.wav"
        subprocess.run(["sox", "-n", "-r", str(tts.SAMPLE_RATE), "-c", "1", "-b", "16", str(gap),
                        "trim", "0", f"{gap_s:.3f}"], check=True)
        piece = work / f"piece{index}.wav"
        if clips and rng.random() < 0.3:
            clip = clips[int(rng.integers(len(clips)))]
            subprocess.run(["sox", str(clip), "-r", str(tts.SAMPLE_RATE), "-c", "1", "-b", "16",
                            str(piece)], check=True)
            used_clips += 1
        else:
            speed = int(rng.integers(140, 201))
            samples = tts.synthesize(texts[spoken % len(texts)], "en-us", speed, 50)
            tts.write_audio(str(piece), samples)
            spoken += 1
        parts += [gap, piece]
        total_s += gap_s + _duration_s(piece)
        index += 1
    subprocess.run(["sox", *map(str, parts), str(path)], check=True)
    return total_s, used_clips, spoken


def _duration_s(path: Path) -> float:
    done = subprocess.run(["soxi", "-D", str(path)], check=True, capture_output=True, text=True)
    return float(done.stdout)


def read_srt(text: str) -> list[SrtCue]:
    cues = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        start, end = (_seconds(t) for t in lines[1].split(" --> "))
        cues.append(SrtCue(start, end, tuple(lines[2:])))
    return cues


def _seconds(stamp: str) -> float:
    hours, minutes, rest = stamp.strip().split(":")
    secs, millis = rest.split(",")
    return int(hours) * 3600 + int(minutes) * 60 + int(secs) + int(millis) / 1000


def utterance_of_each_cue(cues: list[SrtCue], finals: list[list[str]]) -> list[int] | None:
    """The index of the final each cue's first word belongs to (None: the words differ)."""
    owners = [i for i, words in enumerate(finals) for _ in words]
    flat = [w for words in finals for w in words]
    position = 0
    result = []
    for cue in cues:
        words = split_words(" ".join(cue.lines))
        if flat[position : position + len(words)] != words:
            return None
        result.append(owners[position])
        position += len(words)
    return result if position == len(flat) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "caption_report")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--model", default=str(ROOT / "models" / "tiny-en"))
    parser.add_argument("--audio", type=Path, help="report on this recording instead of a new one")
    parser.add_argument("--max-cps", type=float, default=MAX_CPS)
    parser.add_argument("--min-s", type=float, default=MIN_CUE_S)
    args = parser.parse_args()
    tts.check_tools()
    args.out.mkdir(parents=True, exist_ok=True)
    audio = args.out / "mixed.wav"
    if args.audio is not None:
        audio = args.out / "mixed.wav"
        if args.audio.resolve() != audio.resolve():
            subprocess.run(["sox", str(args.audio), str(audio)], check=True)
        total_s, clips, spoken = _duration_s(audio), 0, 0
    else:
        with tempfile.TemporaryDirectory() as work:
            total_s, clips, spoken = build_audio(audio, args.minutes, args.seed, Path(work))
    command = [sys.executable, "-m", "streamasr", "file", str(audio), "-m", args.model,
               "-o", str(args.out), "--format", "srt,jsonl", "--cue-max-cps", f"{args.max_cps:g}",
               "--cue-min-s", f"{args.min_s:g}"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"streamasr file failed ({done.returncode}): {done.stderr}")
    cues = read_srt((args.out / "mixed.srt").read_text(encoding="utf-8"))
    records = [json.loads(line) for line in (args.out / "mixed.jsonl").read_text().splitlines()]
    finals = [split_words(r["text"]) for r in records if r["type"] == "final" and r["text"]]
    owners = utterance_of_each_cue(cues, finals)

    def room_after(index: int) -> float:
        cue = cues[index]
        following = cues[index + 1].start_s if index + 1 < len(cues) else total_s
        return min(following, cue.start_s + MAX_CUE_S) - cue.end_s

    durations = [c.end_s - c.start_s for c in cues]
    short = [i for i, d in enumerate(durations) if d < args.min_s - 1e-6]
    fast = [i for i, c in enumerate(cues) if c.cps > args.max_cps + 1e-6]
    orphans = 0
    if owners is not None:
        orphans = sum(
            1 for cue, owner in zip(cues, owners, strict=True)
            if len(split_words(" ".join(cue.lines))) < MIN_CUE_WORDS
            and len(finals[owner]) >= MIN_CUE_WORDS
        )
    rows = [
        ("audio", f"{total_s / 60:.1f} min" + (
            f": {clips} bundled clips, {spoken} espeak-ng paragraphs" if clips + spoken else "")),
        ("utterances (finals)", str(len(finals))),
        ("cues", str(len(cues))),
        ("shortest cue", f"{min(durations):.2f} s"),
        (f"cues under {args.min_s:g} s", f"{len(short)} "
         f"({sum(room_after(i) > ROOM_S for i in short)} with silence left after them)"),
        ("fastest cue", f"{max(c.cps for c in cues):.1f} characters/s"),
        (f"cues over {args.max_cps:g} characters/s", f"{len(fast)} "
         f"({sum(room_after(i) <= ROOM_S for i in fast)} with no silence to extend into, "
         f"{sum(room_after(i) > ROOM_S for i in fast)} with silence left after them)"),
        (f"orphan cues (under {MIN_CUE_WORDS} words)", str(orphans) if owners else "unknown"),
        ("SRT words == JSONL words", "yes" if owners is not None else "NO"),
    ]
    note = [line for line in done.stderr.splitlines() if "cues:" in line]
    if note:
        rows.append(("streamasr's note", note[0].split(": ", 1)[1]))
    report = "| figure | value |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows)
    report += f"\ncommand: `{' '.join(['streamasr', *command[3:]])}`\n"
    (args.out / "report.md").write_text(report, encoding="utf-8")
    print(report, end="")


if __name__ == "__main__":
    main()
