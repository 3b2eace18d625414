"""Every input path with every output format and every finishing step.

A table: input (file, stdin, raw stdin, `--server`, the microphone through a PulseAudio null
sink locally and with `--server`, `--ray`) x format (text, jsonl, srt, vtt on stdout; txt
with -o) x finisher (none, --sentence-case, --punctuate with the tiny punctuation model).
Each cell either equals what a local `streamasr file` writes for the same audio (JSONL
compared without the clocks) or is refused with exit 2 and one line before any audio or
model work; no cell prints a traceback.

Cheap by design: one server and one PulseAudio server for the module, one short clip, the
cells run a few at a time, the microphone cells all listen to one playback at once, and the
references are one `file -o DIR --format txt,jsonl,srt,vtt` per finisher.

`COMBINATIONS_TABLE=PATH python -m pytest tests/test_combinations.py` also writes the table
of outcomes as Markdown to PATH (docs/file.md holds one).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import soundfile as sf
from pulse_fixture import PulseServer, pulse_server
from serve_fixture import CLOCK_FIELDS, ServerProcess, serve

__all__ = ["pulse_server"]  # the fixture, imported for pytest

REPO = Path(__file__).resolve().parent.parent
MODEL = "tiny-en"
CLIP = REPO / "models" / "tiny-en" / "test_wavs" / "3.wav"  # TURN YOUR FACE TO THE WALL
PUNCT = str(REPO / "models" / "tiny-punct-en")
FINISHERS: dict[str, tuple[str, ...]] = {
    "none": (),
    "--sentence-case": ("--sentence-case",),
    "--punctuate": ("--punctuate", PUNCT),
}
STDOUT_FORMATS = ("text", "jsonl", "srt", "vtt")
FILE_FORMATS = ("txt", "jsonl", "srt", "vtt")  # what -o DIR writes in one run
FORMATS = (*STDOUT_FORMATS, "txt -o")
INPUTS = ("file", "stdin", "raw stdin", "--server", "mic", "mic --server", "--ray")
#: Cells that cannot work, with the reason; everything else must equal local `file`.
REFUSED: dict[tuple[str, str, str], str] = {
    **{("--ray", fmt, fin): "--ray writes files: needs -o DIR"
       for fmt in STDOUT_FORMATS for fin in FINISHERS},
    ("--ray", "txt -o", "--punctuate"): "--punctuate runs on local decoding only",
}
#: Cells not run here, and why: a Ray cluster costs more than this whole file, so
#: tests/test_ray_cluster.py runs these two on its own cluster (its `file` tests, every
#: output equal to a local run's); mic writes no files (its --log and --save are the files
#: of a live session).
NOT_RUN = {
    ("--ray", "txt -o", "none"): "= file (test_ray_cluster.py)",
    ("--ray", "txt -o", "--sentence-case"): "= file (test_ray_cluster.py)",
    **{(mic, "txt -o", fin): "n/a (no -o)" for fin in FINISHERS for mic in ("mic", "mic --server")},
}
CELL_TIMEOUT_S = 120


@dataclass(frozen=True)
class Outcome:
    """What one cell did: "equal", "refused" (exit 2 and one line), or what went wrong."""

    status: str
    detail: str = ""


def run(args: list[str], stdin: bytes | None = None, env: dict[str, str] | None = None,
        cwd: Path = REPO) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "streamasr", *args], input=stdin, cwd=cwd,
                          capture_output=True, timeout=CELL_TIMEOUT_S,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def records(text: str) -> list[dict[str, object]]:
    """JSONL without what the clock and the input's name decide."""
    drop = {*CLOCK_FIELDS, "source", "v"}
    return [{k: v for k, v in json.loads(line).items() if k not in drop}
            for line in text.splitlines() if line.strip()]


def normal(fmt: str, text: str) -> object:
    """An output in the form two runs are compared in: JSONL as records, WebVTT without its
    NOTE naming the input, the rest as written."""
    if fmt == "jsonl":
        return records(text)
    if fmt == "vtt":
        return "\n".join(line for line in text.splitlines() if not line.startswith("NOTE "))
    return text


def judge(done: subprocess.CompletedProcess[bytes], fmt: str, expected: object,
          output: Callable[[], str] | None = None) -> Outcome:
    stderr = done.stderr.decode(errors="replace")
    if "Traceback" in stderr:
        return Outcome("traceback", stderr.strip().splitlines()[-1])
    if done.returncode == 2:
        lines = [line for line in stderr.splitlines() if line.strip()]
        return Outcome("refused" if len(lines) == 1 else "refused, several lines", stderr)
    if done.returncode != 0:
        return Outcome(f"exit {done.returncode}", stderr.strip()[-300:])
    got = normal(fmt, output() if output is not None else done.stdout.decode())
    return Outcome("equal") if got == expected else Outcome("differs", f"{got!r} != {expected!r}")


def references(directory: Path, inputs: list[Path], finisher: str) -> dict[Path, dict[str, object]]:
    """Local `file` on each input, every file format from one run: per input, per format."""
    done = run(["file", *map(str, inputs), "--model", MODEL, "-o", str(directory),
                "--format", ",".join(FILE_FORMATS), *FINISHERS[finisher]])
    assert done.returncode == 0, done.stderr.decode()
    out: dict[Path, dict[str, object]] = {}
    for path in inputs:
        per = {ext: normal(ext, (directory / f"{path.stem}.{ext}").read_text())
               for ext in FILE_FORMATS}
        assert str(per["txt"]).strip(), f"no speech recognised in {path}"  # never vacuous
        out[path] = {**per, "text": per["txt"], "txt -o": per["txt"]}
    return out


def file_cells(name: str, base: list[str], stdin: bytes | None, stem: str,
               expected: dict[str, object], finisher: str, tmp: Path,
               ) -> list[tuple[tuple[str, str, str], Callable[[], Outcome]]]:
    """The cells of one input path and finisher: each stdout format, then -o DIR."""
    cells: list[tuple[tuple[str, str, str], Callable[[], Outcome]]] = []
    extra = list(FINISHERS[finisher])
    for fmt in STDOUT_FORMATS:
        def cell(fmt: str = fmt) -> Outcome:
            done = run([*base, "--format", fmt, *extra], stdin)
            return judge(done, fmt, expected[fmt])
        cells.append(((name, fmt, finisher), cell))

    def to_dir() -> Outcome:
        folder = tmp / f"{name}-{finisher}".replace(" ", "_").replace("-", "")
        done = run([*base, "-o", str(folder), "--format", ",".join(FILE_FORMATS), *extra], stdin)
        outcome = judge(done, "txt", expected["txt"], lambda: (folder / f"{stem}.txt").read_text())
        for ext in FILE_FORMATS[1:]:  # the other files of the same run must agree too
            if outcome.status == "equal":
                got = normal(ext, (folder / f"{stem}.{ext}").read_text())
                if got != expected[ext]:
                    outcome = Outcome("differs", f"{stem}.{ext}: {got!r} != {expected[ext]!r}")
        return outcome
    cells.append(((name, "txt -o", finisher), to_dir))
    return cells


def wait_until_quiet(logs: list[Path], quiet_s: float = 3.0, limit_s: float = 60.0) -> None:
    """Until no capture's --log has grown for `quiet_s`: every event of the playback is out
    (on a loaded machine the engine, or the server, can trail the audio by seconds)."""
    sizes: list[int] = []
    still_since = time.monotonic()
    deadline = still_since + limit_s
    while time.monotonic() < deadline:
        now = [log.stat().st_size if log.exists() else 0 for log in logs]
        if now != sizes:
            sizes, still_since = now, time.monotonic()
        elif time.monotonic() - still_since >= quiet_s:
            return
        time.sleep(0.2)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    # --max-batch 1: cells run side by side, and sessions stepped in one batch of the int8
    # model may decode differently from `file` (dynamic quantisation, docs/performance.md)
    with serve("--max-batch", "1") as process:
        yield process


def mic_outcomes(pulse: PulseServer, server: ServerProcess, tmp: Path,
                 ) -> dict[tuple[str, str, str], Outcome]:
    """Every mic cell, local and `--server`, from one playback: a capture per format and
    finisher listening at once (started one after another: PortAudio's device scan is not
    for many at once), stopped by Ctrl-C after it, each compared with local `file` on the
    audio it saved (--save); the JSONL cell is its --log."""
    decoders = {"mic": ("--model", MODEL), "mic --server": ("--server", server.url)}
    runs: dict[tuple[str, str, str], tuple[subprocess.Popen[bytes], Path, Path]] = {}
    errs: dict[tuple[str, str, str], Path] = {}
    for name, decoder in decoders.items():
        for finisher in FINISHERS:
            for fmt in ("text", "srt", "vtt"):
                key = f"{name}-{fmt}-{finisher}".replace(" ", "").replace("-", "")
                saved, log = tmp / f"{key}.wav", tmp / f"{key}.jsonl"
                errs[(name, fmt, finisher)] = err = tmp / f"{key}.err"
                process = subprocess.Popen(
                    [sys.executable, "-m", "streamasr", "mic", "--device", "pulse", *decoder,
                     "--save", str(saved), "--log", str(log),
                     "--format", fmt, *FINISHERS[finisher]],
                    cwd=REPO, stdout=subprocess.PIPE, stderr=err.open("wb"),
                    env={**pulse.env, "PYTHONPATH": str(REPO)})
                runs[(name, fmt, finisher)] = (process, saved, log)
                deadline = time.monotonic() + 60
                while "listening:" not in err.read_text():  # capturing: start the next
                    assert time.monotonic() < deadline and process.poll() is None, (
                        err.read_text())
                    time.sleep(0.05)
    time.sleep(0.6)  # ALSA's first block is silence from before the server delivers audio
    assert pulse.play(CLIP).wait(timeout=60) == 0
    time.sleep(2.5)  # the last words out and an endpoint; then Ctrl-C, as a user stops it
    wait_until_quiet([log for _, _, log in runs.values()])  # a busy machine decodes late
    for process, _, _ in runs.values():
        process.send_signal(signal.SIGINT)
    outcomes: dict[tuple[str, str, str], Outcome] = {}
    finished = {key: ((process.communicate(timeout=CELL_TIMEOUT_S)[0],
                       errs[key].read_bytes()), saved, log)
                for key, (process, saved, log) in runs.items()}
    for finisher in FINISHERS:
        keys = [key for key in finished if key[2] == finisher]
        saved_files = [finished[key][1] for key in keys]
        expected = references(tmp / f"mic-ref-{finisher.strip('-')}", saved_files, finisher)
        for key in keys:
            (out, err), saved, log = finished[key]
            code = runs[key][0].returncode
            stopped = code == 130 and b"interrupted" in err  # Ctrl-C, flushed: the way to stop
            done = subprocess.CompletedProcess([], 0 if stopped else code, out, err)
            outcomes[key] = judge(done, key[1], expected[saved][key[1]])
        for name in decoders:  # --log is the JSONL cell: the very events of the capture
            (out, err), saved, log = finished[(name, "text", finisher)]
            done = subprocess.CompletedProcess([], 0, out, err)
            outcomes[(name, "jsonl", finisher)] = judge(
                done, "jsonl", expected[saved]["jsonl"], log.read_text)
    return outcomes


@pytest.fixture(scope="module")
def outcomes(server: ServerProcess, pulse_server: PulseServer,
             tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], Outcome]:
    tmp = tmp_path_factory.mktemp("combinations")
    data, rate = sf.read(str(CLIP), dtype="int16")
    wav, raw = CLIP.read_bytes(), data.tobytes()
    cells: list[tuple[tuple[str, str, str], Callable[[], Outcome]]] = []
    for finisher in FINISHERS:
        expected = references(tmp / f"ref-{finisher.strip('-')}", [CLIP], finisher)[CLIP]
        local = ["file", "--model", MODEL]
        cells += file_cells("file", [*local, str(CLIP)], None, CLIP.stem, expected, finisher, tmp)
        cells += file_cells("stdin", [*local, "-"], wav, "stdin", expected, finisher, tmp)
        cells += file_cells("raw stdin", [*local, "-", "--raw", "s16le", "--rate", str(rate)],
                            raw, "stdin", expected, finisher, tmp)
        cells += file_cells("--server", ["file", str(CLIP), "--server", server.url], None,
                            CLIP.stem, expected, finisher, tmp)
        ray = ["file", str(CLIP), "--model", MODEL, "--ray"]
        for fmt in STDOUT_FORMATS:
            cells.append((("--ray", fmt, finisher), lambda fmt=fmt, fin=finisher, ray=ray: judge(
                run([*ray, "--format", fmt, *FINISHERS[fin]]), fmt, None)))
    cells.append((("--ray", "txt -o", "--punctuate"), lambda: judge(
        run(["file", str(CLIP), "--model", MODEL, "--ray", "-o", str(tmp / "ray"),
             *FINISHERS["--punctuate"]]), "txt", None)))
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = dict(zip([key for key, _ in cells], pool.map(lambda c: c[1](), cells),
                           strict=True))
    results.update(mic_outcomes(pulse_server, server, tmp))
    table = os.environ.get("COMBINATIONS_TABLE")
    if table:
        Path(table).write_text(markdown(results))
    return results


def markdown(results: dict[tuple[str, str, str], Outcome]) -> str:
    """The outcome of every cell as a Markdown table: one row per input and finisher."""
    lines = ["| input | finisher | " + " | ".join(FORMATS) + " |",
             "|---|---|" + "---|" * len(FORMATS)]
    for name in INPUTS:
        for finisher in FINISHERS:
            cells = []
            for fmt in FORMATS:
                key = (name, fmt, finisher)
                if key in NOT_RUN:
                    cells.append(NOT_RUN[key])
                    continue
                outcome = results.get(key, Outcome("missing"))
                cells.append("= file" if outcome.status == "equal" else
                             "refused (2)" if outcome.status == "refused" else outcome.status)
            lines.append(f"| {name} | {finisher} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", INPUTS)
def test_every_cell_equals_local_file_or_is_refused(
    name: str, outcomes: dict[tuple[str, str, str], Outcome]
) -> None:
    wrong = {}
    for fmt in FORMATS:
        for finisher in FINISHERS:
            key = (name, fmt, finisher)
            if key in NOT_RUN:
                continue
            want = "refused" if key in REFUSED else "equal"
            outcome = outcomes.get(key, Outcome("missing"))
            if outcome.status != want:
                wrong[f"{fmt} {finisher}"] = outcome
    assert not wrong, wrong


def test_a_refusal_names_the_way_out(outcomes: dict[tuple[str, str, str], Outcome]) -> None:
    """A refused cell says what to drop or add, in one line, before any work."""
    for key in REFUSED:
        detail = outcomes[key].detail
        assert "error" in detail or "Usage" in detail or "No such option" in detail, (key, detail)
