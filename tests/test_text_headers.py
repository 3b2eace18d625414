"""`--format text` with several inputs: a `==> NAME <==` header per input, like `tail`.

Run through the CLI in a fresh process, stdout on a pipe, as a script would.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "models" / "tiny-en" / "test_wavs"
A = str(SAMPLES / "1.wav")
B = str(SAMPLES / "4.wav")  # one of the samples picked among those the model gets right


def reference(key: str) -> str:
    """A sample's text in the model's trans.txt."""
    rows = (SAMPLES / "trans.txt").read_text(encoding="utf-8").splitlines()
    return dict(row.split(" ", 1) for row in rows)[key]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", "file", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def single() -> dict[str, str]:
    """Each sample's text output on its own: the reference for the bodies."""
    return {path: cli(path, "--format", "text").stdout for path in (A, B)}


def test_one_input_is_one_line_per_final_and_no_header(single: dict[str, str]) -> None:
    # the bundled model gets this sample right: the whole output is known byte for byte
    assert single[B] == reference("4") + "\n"
    assert single[A].strip() and "==>" not in single[A] and not single[A].endswith("\n\n")


def test_several_inputs_each_get_a_header_and_are_separated_by_an_empty_line(
    single: dict[str, str],
) -> None:
    run = cli(A, B, "--format", "text")
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"==> {A} <==\n{single[A]}\n==> {B} <==\n{single[B]}"


def test_the_same_input_twice_gets_two_headers(single: dict[str, str]) -> None:
    run = cli(A, A, "--format", "text")
    assert run.stdout == f"==> {A} <==\n{single[A]}\n==> {A} <==\n{single[A]}"


def test_a_failed_input_gets_no_header_and_the_others_still_run(
    single: dict[str, str], tmp_path: Path
) -> None:
    missing = str(tmp_path / "missing.wav")
    run = cli(A, missing, B, "--format", "text")
    assert run.returncode == 1
    assert run.stdout == f"==> {A} <==\n{single[A]}\n==> {B} <==\n{single[B]}"
    assert "missing.wav: no such file" in run.stderr


def test_a_script_can_split_the_output_back_into_files(single: dict[str, str]) -> None:
    out = cli(A, B, "--format", "text").stdout
    parts: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("==> ") and line.endswith(" <=="):
            current = line[4:-4]
            parts[current] = []
        elif line and current is not None:
            parts[current].append(line)
    assert {k: "\n".join(v) + "\n" for k, v in parts.items()} == single


def test_other_formats_are_unchanged_by_several_inputs() -> None:
    jsonl = cli(A, B, "--format", "jsonl").stdout
    vtt = cli(A, B, "--format", "vtt").stdout
    assert "==>" not in jsonl and "==>" not in vtt
    assert vtt.startswith("WEBVTT\n") and vtt.count("\nNOTE ") == 2
    assert jsonl.count('"type": "summary"') == 2
