"""Hostile command lines, names, signals and outputs, each in a fresh process as a user runs it.

Every case must end in at most one line of error on stderr, the documented exit code
(usage 2, runtime 1, SIGTERM 143, SIGHUP 129) and never a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import soundfile as sf
from pulse_fixture import PulseServer, pulse_server

from streamasr.bench.outdir import RECORDS_NAME

__all__ = ["pulse_server"]  # the fixture, imported for pytest

ROOT = Path(__file__).resolve().parents[1]
TINY_EN = ROOT / "models" / "tiny-en"
CLIP = TINY_EN / "test_wavs" / "1.wav"


def cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """`python -m streamasr.cli ...` in a fresh process."""
    if "stdout" not in kwargs and "stderr" not in kwargs:
        kwargs["capture_output"] = True
    kwargs.setdefault("timeout", 120)
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", *args], text=True, cwd=ROOT, **kwargs
    )


def assert_clean(result: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert "Exception ignored" not in result.stderr, result.stderr


# --- brackets in names ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def bracket_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Audio named `a [final].wav`, `[/x].wav` (a folder named `[` holding x].wav) and a model
    folder `m [bold]x[red]`."""
    root = tmp_path_factory.mktemp("brackets")
    shutil.copy(CLIP, root / "a [final].wav")
    (root / "[").mkdir()
    shutil.copy(CLIP, root / "[" / "x].wav")
    shutil.copytree(TINY_EN, root / "m [bold]x[red]", ignore=shutil.ignore_patterns("test_wavs"))
    return root


def test_file_prints_bracketed_names_exactly(bracket_dir: Path) -> None:
    name = str(bracket_dir / "a [final].wav")
    result = cli("file", name, "--format", "text")
    assert result.returncode == 0, result.stderr
    assert_clean(result)
    assert f"{name}: " in result.stderr  # the summary names the file as given
    assert result.stdout.strip()


def test_file_with_slash_markup_in_name_runs(bracket_dir: Path) -> None:
    name = str(bracket_dir / "[/x].wav")
    result = cli("file", name, "--format", "text")
    assert result.returncode == 0, result.stderr
    assert_clean(result)
    assert f"{name}: " in result.stderr


@pytest.mark.parametrize("name", ["a [final]-missing.wav", "[/x]-missing.wav"])
def test_missing_bracketed_file_is_named_exactly(bracket_dir: Path, name: str) -> None:
    path = str(bracket_dir / name)
    result = cli("file", path, "--format", "text")
    assert result.returncode == 1
    assert_clean(result)
    assert path in result.stderr


def test_bracketed_model_dir_in_file_latency_and_bench(bracket_dir: Path) -> None:
    model = str(bracket_dir / "m [bold]x[red]")
    ran = cli("file", str(CLIP), "--model", model, "--format", "text", "--verbose")
    assert ran.returncode == 0, ran.stderr
    assert_clean(ran)
    budget = cli("latency", "--model", model)
    assert budget.returncode == 0, budget.stderr
    assert_clean(budget)
    assert "zipformer2 export, chunk 16" in budget.stdout
    refused = cli("file", str(CLIP), "--model", model, "--chunk", "24")
    assert refused.returncode == 2
    assert_clean(refused)
    assert "model m [bold]x[red] has no export for --chunk 24" in refused.stderr
    bench = cli("bench", str(bracket_dir / "no [such] set.jsonl"), "--model", model)
    assert bench.returncode != 0
    assert_clean(bench)
    assert "no [such] set.jsonl" in bench.stderr


def test_requests_the_model_cannot_serve_exit_2(tmp_path: Path) -> None:
    hotwords = tmp_path / "hot.txt"
    hotwords.write_text("HELLO\n")
    cases = [
        (["file", WAV, "--chunk", "24"], "no export for --chunk 24; it has chunk 16, 32"),
        (["file", WAV, "--model", "tiny-random-ctc", "--hotwords", str(hotwords),
          "--decoding-method", "modified_beam_search"], "this model is CTC"),
        (["latency", "--model", "tiny-en", "--chunk", "24"], "no export for --chunk 24"),
    ]
    for args, message in cases:
        result = cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert_clean(result)
        assert message in result.stderr
    helped = cli("file", "--help", env=dict(os.environ, COLUMNS="200"))
    assert "usage error (exit 2)" in helped.stdout


def test_models_list_prints_a_bracketed_cache_path(tmp_path: Path) -> None:
    home = tmp_path / "cache [red]x[/red]"
    home.mkdir(parents=True)
    result = cli("models", "list", env=dict(os.environ, STREAMASR_HOME=str(home)))
    assert result.returncode == 0, result.stderr
    assert_clean(result)
    assert f"cache: {home}" in result.stderr.replace("\n", "")


def test_missing_matplotlib_hint_keeps_its_brackets(tmp_path: Path) -> None:
    # a real process in which matplotlib cannot be imported, as on a machine without it
    code = (
        "import sys; sys.modules['matplotlib'] = None; sys.argv[0] = 'streamasr'; "
        "from streamasr.cli import main; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "bench", str(tmp_path / "set.jsonl"), "--plot", "x.png"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 1
    assert_clean(result)
    assert "pip install 'streamasr[plot]'" in result.stderr


# --- numbers ---------------------------------------------------------------------------------

WAV = str(CLIP)
BAD_NUMBERS = [
    (["file", WAV, "--block-ms", "inf"], "--block-ms"),
    (["file", WAV, "--block-ms", "nan"], "--block-ms"),
    (["file", WAV, "--block-ms", "0"], "--block-ms"),
    (["file", WAV, "--block-ms", "1e9"], "--block-ms"),
    (["file", WAV, "--tail-padding", "nan"], "--tail-padding"),
    (["file", WAV, "--tail-padding", "inf"], "--tail-padding"),
    (["file", WAV, "--tail-padding", "1e6"], "--tail-padding"),
    (["file", WAV, "--tail-padding", "-1"], "--tail-padding"),
    (["file", WAV, "--rule1", "nan"], "--rule1"),
    (["file", WAV, "--rule2", "inf"], "--rule2"),
    (["file", WAV, "--rule3", "0"], "--rule3"),
    (["file", WAV, "--threads", "100000"], "--threads"),
    (["file", WAV, "--threads", "0"], "--threads"),
    (["file", WAV, "--chunk", "0"], "--chunk"),
    (["file", WAV, "--chunk", "100000"], "--chunk"),
    (["file", WAV, "--hotwords-score", "nan"], "--hotwords-score"),
    (["file", WAV, "--hotwords-score", "1e9"], "--hotwords-score"),
    (["file", WAV, "--onset-dbfs", "nan"], "--onset-dbfs"),
    (["file", WAV, "--onset-dbfs", "20"], "--onset-dbfs"),
    (["mic", "--duration", "nan"], "--duration"),
    (["mic", "--duration", "0"], "--duration"),
    (["mic", "--max-backlog", "inf"], "--max-backlog"),
    (["mic", "--channel", "0"], "--channel"),
    (["mic", "--threads", "100000"], "--threads"),
    (["mic", "--block-ms", "nan"], "--block-ms"),
    (["mic", "--onset-dbfs", "inf"], "--onset-dbfs"),
    (["bench", "x.jsonl", "--block-ms", "nan"], "--block-ms"),
    (["bench", "x.jsonl", "--tail-padding", "inf"], "--tail-padding"),
    (["bench", "x.jsonl", "--rule1", "nan"], "--rule1"),
    (["bench", "x.jsonl", "--threads", "100000"], "--threads"),
    (["bench", "x.jsonl", "--chunk", "16,100000"], "--chunk"),
    (["bench", "x.jsonl", "--streams", "100000"], "--streams"),
    (["bench", "x.jsonl", "--limit", "0"], "--limit"),
    (["latency", "--chunk", "100000"], "--chunk"),
    (["latency", "--chunk", "0"], "--chunk"),
    (["latency", "--att-context-size", "70,13", "--layers", "100000000"], "--layers"),
    (["latency", "--chunk", "4", "--subsampling", "100000"], "--subsampling"),
    (["latency", "--model", "tiny-en", "--measure", "--threads", "100000"], "--threads"),
    (["mask", "--chunk", "2", "--layers", "100000000"], "--layers"),
    (["mask", "--chunk", "2", "--layers", "0"], "--layers"),
    (["mask", "--chunk", "2", "--steps", "100000000"], "--steps"),
    (["mask", "--chunk", "100000"], "--chunk"),
    (["mask", "--chunk", "2", "--left-chunks", "100000000"], "--left-chunks"),
]


@pytest.mark.parametrize(("args", "option"), BAD_NUMBERS, ids=lambda v: " ".join(v) if
                         isinstance(v, list) else v)
def test_bad_number_is_a_usage_error_naming_the_option(args: list[str], option: str) -> None:
    result = cli(*args, timeout=60)
    assert result.returncode == 2, result.stderr
    assert_clean(result)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and option in lines[0]
    assert " to " in lines[0] or "at least" in lines[0]  # the valid range is named


def test_mask_with_many_layers_finishes_at_once() -> None:
    result = cli("mask", "--chunk", "2", "--steps", "200", "--layers", "1000", "-f", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["layers"] == 1000
    assert report["receptive_field_lookahead_steps"][0] == 1  # chunks never see past their end


def test_very_long_file_name_is_one_line_and_others_still_run(tmp_path: Path) -> None:
    long_name = str(tmp_path / ("a" * 5000 + ".wav"))
    result = cli("file", long_name, WAV, "--format", "text")
    assert result.returncode == 1
    assert_clean(result)
    assert "file name too long (5" in result.stderr
    assert result.stdout.strip()  # the second file was transcribed
    assert "1 of 2 inputs failed" in result.stderr


# --- stdout that cannot take data -------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["text", "jsonl", "srt"])
def test_full_disk_on_stdout_is_one_line_exit_1(fmt: str) -> None:
    with open("/dev/full", "w") as full:
        result = cli("file", WAV, "--format", fmt, stdout=full, stderr=subprocess.PIPE)
    assert result.returncode == 1
    assert_clean(result)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: cannot write to standard output: No space left on device; free some space "
        "or write elsewhere"
    ]


def test_a_reader_that_goes_away_ends_the_run_quietly_like_other_unix_tools() -> None:
    """`| head`: the reader took what it wanted, or nothing (`| head -c0`); that is not an
    error to report. The run stops at once, says nothing, and exits 141 (128 + SIGPIPE), as
    `yes | head` does."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head -c0`: nobody will ever read
    try:
        result = cli("file", WAV, "--format", "jsonl", stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert result.returncode == 141
    assert_clean(result)
    assert "error" not in result.stderr
    shell = subprocess.run(
        f"{sys.executable} -m streamasr.cli file '{WAV}' '{WAV}' --format jsonl | head -n 1; "
        'echo "status ${PIPESTATUS[0]}"',
        shell=True, executable="/bin/bash", cwd=ROOT, capture_output=True, text=True,
        timeout=120,
    )
    first, status = shell.stdout.splitlines()
    assert json.loads(first)["type"] in ("partial", "first_token") and status == "status 141"
    assert_clean(shell)
    assert "error" not in shell.stderr


def test_closed_stdout_fd_is_one_line_exit_1() -> None:
    proc = subprocess.run(
        f"exec {sys.executable} -m streamasr.cli file '{WAV}' --format text >&-",
        shell=True, cwd=ROOT, capture_output=False, stderr=subprocess.PIPE, text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert_clean(proc)
    assert "error: cannot write to standard output: it is closed" in proc.stderr


def test_a_reader_that_goes_away_from_models_list_and_latency_is_quiet_too() -> None:
    for args in (["models", "list"], ["latency", "--chunk", "16"], ["mask", "--chunk", "2"]):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            result = cli(*args, stdout=write_end, stderr=subprocess.PIPE)
        finally:
            os.close(write_end)
        assert result.returncode == 141, args
        assert_clean(result)
        assert "error" not in result.stderr


# --- SIGTERM and SIGHUP --------------------------------------------------------------------


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_stop_signal_flushes_final_and_summary(signum: int, code: int) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamasr.cli", "file", WAV, "--realtime", "--format", "jsonl"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    records = []
    assert proc.stdout is not None
    for line in proc.stdout:
        records.append(json.loads(line))
        if records[-1]["type"] == "partial" and records[-1]["text"]:
            proc.send_signal(signum)
            break
    rest, err = proc.communicate(timeout=60)
    records += [json.loads(line) for line in rest.splitlines()]
    assert proc.returncode == code, err
    assert "Traceback" not in err
    kinds = [r["type"] for r in records]
    assert "final" in kinds and kinds[-1] == "summary"
    summary = records[-1]
    finals = " ".join(r["text"] for r in records if r["type"] == "final")
    assert summary["text"] == finals and finals.strip()
    # stopped early: less audio than the clip holds
    assert summary["audio_s"] < 3.0 or "interrupted" in err


def test_sigterm_stops_bench_like_ctrl_c(tmp_path: Path) -> None:
    from conftest import make_dataset

    data = make_dataset(tmp_path / "set", n=3, seed=5)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamasr.cli", "bench", str(data / "manifest.jsonl"),
         "--model", "tiny-en", "--realtime", "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    records = out / RECORDS_NAME
    deadline = time.monotonic() + 60
    # --realtime takes as long as the audio: stop once the first utterance is recorded
    while time.monotonic() < deadline and not (records.exists() and records.read_text()):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert "interrupted" in err
    assert records.read_text().strip()  # what finished before the signal is kept


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_stop_signal_ends_mic_like_ctrl_c(
    pulse_server: PulseServer, tmp_path: Path, signum: int, code: int
) -> None:
    """A real capture through PortAudio from a private PulseAudio server (see test_mic_pulse)."""
    saved, log, err_path = tmp_path / "cap.wav", tmp_path / "cap.jsonl", tmp_path / "err.txt"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamasr.cli", "mic", "--model", "tiny-en", "--save",
             str(saved), "--log", str(log), "--format", "text"],
            cwd=ROOT, env=pulse_server.env, stdout=subprocess.PIPE, stderr=err, text=True,
        )
        deadline = time.monotonic() + 60
        while "listening:" not in err_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.6)  # the pulse plugin's first block is silence
        assert pulse_server.play(CLIP).wait(timeout=60) == 0
        time.sleep(0.5)
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=60)
    stderr = err_path.read_text()
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    assert out.strip(), "what was recognised before the signal was lost"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records[-1]["type"] == "summary" and records[-1]["text"].strip()
    assert sf.info(str(saved)).frames > 0


# --- help ----------------------------------------------------------------------------------

COMMANDS = [
    [], ["file"], ["mic"], ["devices"], ["bench"], ["latency"], ["mask"], ["models"],
    ["models", "list"], ["models", "pull"], ["models", "verify"], ["models", "path"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "streamasr")
def test_help_shows_no_bool_type_after_flags(command: list[str]) -> None:
    result = cli(*command, "--help", env=dict(os.environ, COLUMNS="100"))
    assert result.returncode == 0, result.stderr
    assert "--help" in result.stdout
    assert "<bool>" not in result.stdout


def test_make_dataset_help_explains_every_argument() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_dataset.py"), "--help"],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, COLUMNS="200"),
    )
    assert result.returncode == 0, result.stderr
    options = [line.split() for line in result.stdout.splitlines() if line.startswith("  --")]
    assert {words[0] for words in options} == {"--out", "--n", "--seed"}
    for words in options:
        # "--out OUT  help text (default: ...)": more than the flag and its metavar
        assert len(words) > 3 and "(default:" in " ".join(words), words
