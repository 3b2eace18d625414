#!/usr/bin/env python3
"""What test files cost, in wall seconds and CPU seconds, now and at an earlier commit.

Why: CI's time is the sum of what its test files cost, and on a shared machine wall time
follows the load more than the tests. CPU seconds (pytest and every process it starts) move
much less with the load, so each file is run on the working tree and, with --before, on a
clean export of an earlier commit (or two commits, --before and --after), one after the
other, and the ratio is what to read.

    python scripts/suite_cost.py --before 3b73560 tests/test_chinese.py \
        tests/test_untrusted_models.py tests/test_models_reproducible.py

Each run is `python -m pytest -q -p no:randomly -n 0 FILE` in a fresh process; a failing run
is reported as such. The record names the CPU model and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing it

from streamasr.bench.report import cpu_model  # noqa: E402


def export_commit(rev: str, dest: Path) -> Path:
    """The tracked files of `rev`, unpacked into dest (no git metadata, no build outputs)."""
    dest.mkdir()
    archive = dest / "tree.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", rev], cwd=ROOT, stdout=out, check=True)
    tree = dest / "tree"
    tree.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(tree)  # our own commit's files
    archive.unlink()
    return tree


def run_file(tree: Path, test_file: str) -> dict:
    """One pytest run of one file in `tree`: wall and CPU seconds, exit status."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-n", "0", test_file],
        cwd=tree, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = (done.stdout.strip().splitlines() or [""])[-1]
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "rc": done.returncode,
            "result": last}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="test files, relative to the repository")
    parser.add_argument("--before", metavar="REV", help="also run each file at this commit")
    parser.add_argument("--after", metavar="REV",
                        help="run 'now' at this commit instead of the working tree (to compare "
                        "two commits, e.g. C~1 and C, without what else changed since)")
    parser.add_argument("--out", type=Path, help="write the record here as JSON too")
    args = parser.parse_args()
    record: dict = {"cpu_model": cpu_model(), "cpus": os.cpu_count(),
                    "load_before": os.getloadavg(), "files": {}}
    with tempfile.TemporaryDirectory(prefix="suite-cost-") as tmp:
        old_tree = export_commit(args.before, Path(tmp) / "a") if args.before else None
        new_tree = export_commit(args.after, Path(tmp) / "b") if args.after else ROOT
        for test_file in args.files:
            row: dict = {}
            if old_tree is not None:
                row["before"] = run_file(old_tree, test_file)
            row["now"] = run_file(new_tree, test_file)
            if old_tree is not None and row["before"]["cpu_s"]:
                row["cpu_ratio"] = round(row["now"]["cpu_s"] / row["before"]["cpu_s"], 2)
                row["wall_ratio"] = round(row["now"]["wall_s"] / row["before"]["wall_s"], 2)
            record["files"][test_file] = row
            print(test_file, json.dumps(row), flush=True)
    record["load_after"] = os.getloadavg()
    record["before_rev"], record["after_rev"] = args.before, args.after or "working tree"
    print(json.dumps(record, indent=1))
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
