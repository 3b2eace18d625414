#!/usr/bin/env python3
"""Compare streaming models on every test set in one table, through the product's own bench.

Why: replacing a bundled model is decided on one question, "is the new one better on every
held-out set, for every engine and voice?". The answer must be the figures a user gets from
``streamasr bench``, not those of another decoding loop or another scorer. So each model x
set runs the real CLI in a subprocess (``python -m streamasr.cli bench MANIFEST --model M
--chunk N --metric wer --out DIR``); this script only joins bench's per-utterance rows
(``DIR/utterances.jsonl``) with the manifest's own rows (``engine``, ``voice``) and sums the
error counts per set, per set/engine and per set/voice with ``streamasr.bench.metrics``.
Each row's counts are re-scored from its reference and hypothesis, and the per-set total
must equal bench's own summary in ``DIR/results.json``; any difference stops the run.

``--librivox`` adds the five real LibriVox clips of Debian's ``pocketsphinx-testdata``
(references as ``eval_tiny_model.py`` reads them) as a set named ``librivox``: its manifest
is written into ``--out`` and benched like any other set.

Writes ``OUT/compare.json`` (every figure, bench command lines, versions), ``OUT/compare.md``
(one table per level: WER % and reference words per model, and which model is better) and
prints the Markdown. Bench results stay in ``OUT/bench/MODEL/SET/``.

Usage::

    python scripts/compare_models.py --model tiny-en --model models/NEW \\
        --set heldout-debian=build/open/test-heldout-debian/manifest.jsonl \\
        --set neural=build/open/test-neural/manifest.jsonl --librivox \\
        --chunk 16 --out build/compare

A bad ``--set`` spec or a missing manifest exits 2 before any model runs; a failed bench or
a disagreement with bench's summary exits 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_tiny_model import LIBRIVOX, librivox_utterances  # noqa: E402

from streamasr.bench.datasets import load_dataset  # noqa: E402
from streamasr.bench.metrics import ErrorCounts, score, total_counts  # noqa: E402

LIBRIVOX_SET = "librivox"
METRIC = "wer"
LEVELS = (("set", ()), ("engine", ("engine",)), ("voice", ("voice",)))
_SET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_UNKNOWN = "(none)"


class CompareError(Exception):
    """A run that cannot go on; `exit_code` 2 for a usage error, 1 for a failed run."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Row:
    """One benched utterance: where it came from and bench's text for it."""

    set: str
    id: str
    engine: str
    voice: str
    counts: ErrorCounts


# ---- arguments ---------------------------------------------------------------------------


def parse_sets(specs: Sequence[str], librivox: bool) -> dict[str, Path]:
    """`NAME=MANIFEST` specs -> {name: manifest}; every error is a one-line CompareError(2)."""
    sets: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise CompareError(f"--set {spec!r}: expected NAME=MANIFEST.jsonl", 2)
        if not _SET_NAME.match(name):
            raise CompareError(
                f"--set {spec!r}: the name may hold only letters, digits, '_', '.', '-'", 2
            )
        if name in sets or (librivox and name == LIBRIVOX_SET):
            raise CompareError(f"--set {spec!r}: the set name {name!r} is given twice", 2)
        manifest = Path(path)
        if not manifest.is_file():
            raise CompareError(f"--set {spec!r}: manifest {manifest} does not exist", 2)
        sets[name] = manifest
    if not sets and not librivox:
        raise CompareError("nothing to compare on: give --set NAME=MANIFEST or --librivox", 2)
    return sets


def model_slugs(models: Sequence[str]) -> dict[str, str]:
    """A folder name for each model (its last path part; numbered when two share one)."""
    slugs: dict[str, str] = {}
    for model in models:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(model).name or model) or "model"
        slug, n = base, 2
        while slug in slugs.values():
            slug, n = f"{base}-{n}", n + 1
        slugs[model] = slug
    return slugs


# ---- LibriVox ----------------------------------------------------------------------------


def write_librivox_manifest(folder: Path, out: Path) -> Path:
    """A JSONL manifest of the LibriVox clips (one human reader) in `out`; returns its path."""
    rows = [
        {
            "audio_filepath": str((folder / f"{clip}.wav").resolve()),
            "text": text,
            "id": clip,
            "engine": "human",
            "voice": "librivox",
        }
        for clip, text in librivox_utterances(folder)
    ]
    out.mkdir(parents=True, exist_ok=True)
    manifest = out / "librivox.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return manifest


# ---- running bench -----------------------------------------------------------------------


def bench_command(manifest: Path, model: str, chunk: int, out: Path) -> list[str]:
    """The CLI call a user would type, run with this interpreter."""
    return [
        sys.executable,
        "-m",
        "streamasr.cli",
        "bench",
        str(manifest),
        "--model",
        model,
        "--chunk",
        str(chunk),
        "--metric",
        METRIC,
        "--out",
        str(out),
    ]


def run_bench(command: list[str], label: str) -> None:
    """Run one bench; a failure stops everything with bench's last words."""
    print(f"bench: {label}", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise CompareError(f"bench failed for {label} (exit {done.returncode}): {tail}")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def manifest_fields(manifest: Path) -> dict[str, dict[str, Any]]:
    """{utterance id: its manifest row}, ids taken by bench's own reader so they match."""
    lines = manifest.read_text(encoding="utf-8").splitlines()
    fields = {}
    for utt in load_dataset(manifest, "jsonl").utterances:
        number = int(utt.origin.rsplit(":", 1)[1])
        fields[utt.id] = json.loads(lines[number - 1])
    return fields


def joined_rows(set_name: str, bench_rows: list[dict[str, Any]], manifest: Path) -> list[Row]:
    """Bench's rows with engine and voice from the manifest; counts re-scored and checked."""
    fields = manifest_fields(manifest)
    rows = []
    for item in bench_rows:
        counts = ErrorCounts(
            item["counts"]["ref_units"],
            item["counts"]["substitutions"],
            item["counts"]["deletions"],
            item["counts"]["insertions"],
        )
        if not item.get("error") and score(item["reference"], item["hypothesis"], METRIC) != counts:
            raise CompareError(f"{set_name}/{item['id']}: bench's counts differ from a re-score")
        row = fields.get(item["id"], {})
        engine = str(row.get("engine") or _UNKNOWN)
        voice = str(row.get("voice") or _UNKNOWN)
        rows.append(Row(set_name, item["id"], engine, voice, counts))
    return rows


def check_summary(label: str, rows: list[Row], summary: dict[str, Any]) -> None:
    """The corpus counts from bench's rows must be bench's own summary, to the unit."""
    total = total_counts(r.counts for r in rows)
    mine = (len(rows), total.ref_units, total.substitutions, total.deletions, total.insertions)
    keys = ("utterances", "ref_units", "substitutions", "deletions", "insertions")
    theirs = tuple(summary[k] for k in keys)
    rate = None if total.rate_pct is None else round(total.rate_pct, 2)
    if mine != theirs or rate != summary["error_rate_pct"]:
        raise CompareError(
            f"{label}: per-utterance rows give {mine} WER {rate}, bench's summary {theirs} "
            f"WER {summary['error_rate_pct']} (utterances, words, sub, del, ins)"
        )


def bench_one(model: str, set_name: str, manifest: Path, chunk: int, folder: Path) -> dict:
    """Bench one model on one set; its rows joined with the manifest, checked against bench."""
    command = bench_command(manifest, model, chunk, folder)
    label = f"{model} on {set_name}"
    run_bench(command, label)
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    setting = results["settings"][0]
    rows = joined_rows(set_name, read_jsonl(folder / "utterances.jsonl"), manifest)
    check_summary(label, rows, setting["summary"])
    return {
        "model": model,
        "set": set_name,
        "manifest": str(manifest),
        "command": command,
        "out": str(folder),
        "sherpa_onnx_version": results["run"].get("sherpa_onnx_version"),
        "bench_summary": {
            k: setting["summary"][k]
            for k in ("utterances", "failed", "ref_units", "error_rate_pct", "rtf")
        },
        "rows": rows,
    }


# ---- tables ------------------------------------------------------------------------------


def group_counts(rows: list[Row], keys: tuple[str, ...]) -> dict[str, tuple[int, ErrorCounts]]:
    """{"set[/engine|/voice]": (utterances, summed counts)} in first-seen set order."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        name = "/".join([row.set, *(getattr(row, k) for k in keys)])
        groups.setdefault(name, []).append(row)
    return {name: (len(g), total_counts(r.counts for r in g)) for name, g in groups.items()}


def level_table(runs: list[dict], models: Sequence[str], keys: tuple[str, ...]) -> list[dict]:
    """One row per group: each model's WER and words, and which model is better."""
    per_model = {
        m: group_counts([row for run in runs if run["model"] == m for row in run["rows"]], keys)
        for m in models
    }
    names = list(dict.fromkeys(n for m in models for n in per_model[m]))
    if keys:
        order = {run["set"]: i for i, run in enumerate(runs)}
        names.sort(key=lambda n: (order[n.split("/", 1)[0]], n))
    table = []
    for name in names:
        figures = {}
        for m in models:
            utts, counts = per_model[m].get(name, (0, ErrorCounts()))
            figures[m] = {
                "wer_pct": None if counts.rate_pct is None else round(counts.rate_pct, 2),
                "words": counts.ref_units,
                "errors": counts.errors,
                "substitutions": counts.substitutions,
                "deletions": counts.deletions,
                "insertions": counts.insertions,
                "utterances": utts,
            }
        table.append({"group": name, "models": figures, "better": better(figures)})
    return table


def better(figures: dict[str, dict[str, Any]]) -> str:
    """The model with the lowest WER; "tie" when several share it; "-" with one model."""
    rates = {m: f["wer_pct"] for m, f in figures.items() if f["wer_pct"] is not None}
    if len(figures) < 2 or not rates:
        return "-"
    low = min(rates.values())
    best = [m for m, r in rates.items() if r == low]
    return best[0] if len(best) == 1 else "tie"


def markdown(levels: dict[str, list[dict]], models: Sequence[str], chunk: int) -> str:
    """One Markdown table per level."""
    titles = {"set": "set", "engine": "set/engine", "voice": "set/voice"}
    parts = [f"# WER by model (streamasr bench, chunk {chunk})\n"]
    for level, table in levels.items():
        head = [titles[level]] + [c for m in models for c in (f"{m} WER %", f"{m} words")]
        lines = [
            f"## per {titles[level]}",
            "",
            "| " + " | ".join(head + ["better"]) + " |",
            "|" + "---|" + "---:|" * (2 * len(models)) + "---|",
        ]
        for entry in table:
            cells = [entry["group"]]
            for m in models:
                f = entry["models"][m]
                cells += ["n/a" if f["wer_pct"] is None else f"{f['wer_pct']:.2f}", str(f["words"])]
            lines.append("| " + " | ".join(cells + [entry["better"]]) + " |")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


# ---- main --------------------------------------------------------------------------------


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def compare(args: argparse.Namespace, argv: Sequence[str]) -> str:
    """Bench every model on every set and write compare.json / compare.md; returns the md."""
    sets = parse_sets(args.set, args.librivox is not None)
    if args.librivox is not None and not (args.librivox / "transcription").is_file():
        raise CompareError(f"--librivox: {args.librivox / 'transcription'} does not exist", 2)
    models = list(dict.fromkeys(args.model))
    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise CompareError(f"--out {out} is a file; give a folder for the results", 2)
    if args.librivox is not None:
        sets[LIBRIVOX_SET] = write_librivox_manifest(args.librivox, out)
    slugs = model_slugs(models)
    runs = [
        bench_one(m, name, manifest, args.chunk, out / "bench" / slugs[m] / name)
        for m in models
        for name, manifest in sets.items()
    ]
    levels = {level: level_table(runs, models, keys) for level, keys in LEVELS}
    doc = {
        "schema": "streamasr-compare/1",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": [sys.executable, *argv],
        "sherpa_onnx_version": _version("sherpa-onnx"),
        "streamasr_version": _version("streamasr"),
        "metric": METRIC,
        "chunk": args.chunk,
        "models": models,
        "sets": {name: str(path) for name, path in sets.items()},
        "runs": [{k: v for k, v in run.items() if k != "rows"} for run in runs],
        "levels": levels,
        "utterances": [
            {"model": run["model"], **asdict(row)} for run in runs for row in run["rows"]
        ],
    }
    text = markdown(levels, models, args.chunk)
    (out / "compare.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    (out / "compare.md").write_text(text, encoding="utf-8")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", action="append", required=True, help="bench's --model (repeat to compare)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=MANIFEST", help="a test set"
    )
    parser.add_argument(
        "--librivox",
        nargs="?",
        const=LIBRIVOX,
        type=Path,
        default=None,
        help=f"also the LibriVox clips (folder with `transcription`, default {LIBRIVOX})",
    )
    parser.add_argument("--chunk", type=int, default=16, help="bench's --chunk (default 16)")
    parser.add_argument("--out", type=Path, default=Path("build/compare"))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:
        text = compare(args, [__file__, *argv])
    except CompareError as exc:
        print(f"compare_models.py: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
