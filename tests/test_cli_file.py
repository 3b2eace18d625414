"""`streamasr file` end to end: formats, bad inputs, several files, stdin, Ctrl-C, memory."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from streamasr.cli import app

runner = CliRunner()
MODEL = ["--model", "tiny-random-transducer"]


def invoke(*args: str, stdin: bytes | None = None):
    return runner.invoke(app, ["file", *args], input=stdin)


def test_text_format_prints_one_line_per_final(speech_16k: Path) -> None:
    result = invoke(str(speech_16k), *MODEL, "--format", "text")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines and all(line.strip() for line in lines)
    assert "RTF" in result.stderr and "first token" in result.stderr


def test_jsonl_parses_line_by_line_and_carries_times(speech_16k: Path) -> None:
    result = invoke(str(speech_16k), *MODEL, "--format", "jsonl", "--block-ms", "100")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = {r["type"] for r in records}
    assert {"partial", "first_token", "final", "summary"} <= kinds
    events = [r for r in records if r["type"] != "summary"]
    assert all({"seq", "audio_s", "wall_s", "segment"} <= r.keys() for r in events)
    assert [r["seq"] for r in events] == list(range(1, len(events) + 1))
    final = next(r for r in events if r["type"] == "final")
    assert len(final["tokens"]) == len(final["token_times_s"]) > 0
    summary = records[-1]
    assert summary["type"] == "summary" and summary["audio_s"] == pytest.approx(
        sf.info(str(speech_16k)).duration, abs=1e-4
    )


def test_srt_numbering_times_and_cue_shapes_are_valid(speech_16k: Path) -> None:
    result = invoke(str(speech_16k), *MODEL, "--format", "srt", "--rule3", "1.5")
    assert result.exit_code == 0, result.output
    blocks = result.stdout.strip().split("\n\n")
    assert len(blocks) >= 2  # rule3 cuts every 1.5 s
    stamp = re.compile(r"^(\d\d):(\d\d):(\d\d),(\d\d\d) --> (\d\d):(\d\d):(\d\d),(\d\d\d)$")
    previous_end = -1.0
    for number, block in enumerate(blocks, start=1):
        index, times, text = block.split("\n", 2)
        assert int(index) == number and text.strip()
        assert len(text.splitlines()) <= 2 and all(len(line) <= 42 for line in text.splitlines())
        h1, m1, s1, ms1, h2, m2, s2, ms2 = map(int, stamp.match(times).groups())
        start = h1 * 3600 + m1 * 60 + s1 + ms1 / 1000
        end = h2 * 3600 + m2 * 60 + s2 + ms2 / 1000
        assert previous_end <= start <= end <= start + 7.0  # never overlapping, at most 7 s
        previous_end = end


def test_several_inputs_in_one_srt_are_refused_with_the_way_out(speech_16k: Path) -> None:
    result = invoke(str(speech_16k), str(speech_16k), *MODEL, "--format", "srt")
    assert result.exit_code == 2
    assert "--output-dir" in result.stderr and "--format vtt" in result.stderr


def test_chunk_option_selects_and_refuses(speech_16k: Path) -> None:
    ok = invoke(str(speech_16k), *MODEL, "--chunk", "32", "-f", "text", "--verbose")
    assert ok.exit_code == 0 and "chunk 32 = 640 ms" in ok.stderr
    bad = invoke(str(speech_16k), *MODEL, "--chunk", "64")
    assert bad.exit_code == 2  # a setting this model does not have: a usage error
    assert "no export for --chunk 64; it has chunk 16, 32" in bad.stderr


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.wav", "no such file"),
        (lambda d: d, "is a directory"),
        (lambda d: _write(d / "notes.txt", b"just some text\n"), "not audio that libsndfile"),
        (lambda d: _write(d / "cut.wav", b"RIFF\x24\x00\x00\x00WAVEfmt "), "not audio"),
    ],
)
def test_bad_inputs_get_one_line_error_and_exit_1(tmp_path: Path, make, message: str) -> None:
    result = invoke(str(make(tmp_path)), *MODEL)
    assert result.exit_code == 1
    assert message in result.stderr and "Traceback" not in result.output


def test_nan_samples_are_reported_after_flushing_what_was_heard(
    speech_16k: Path, tmp_path: Path
) -> None:
    audio, rate = sf.read(str(speech_16k), dtype="float32")
    audio[rate * 2] = np.nan
    path = tmp_path / "nan.wav"
    sf.write(path, audio, rate, subtype="FLOAT")
    result = invoke(str(path), *MODEL, "-f", "text", "--no-endpoint")
    assert result.exit_code == 1
    assert "sample 32000 (2.000 s) is NaN or infinite" in result.stderr
    assert result.stdout.strip(), "text recognised before the bad sample was lost"


def test_one_bad_file_does_not_stop_the_others(speech_16k: Path, tmp_path: Path) -> None:
    paths = [str(speech_16k), str(tmp_path / "gone.wav"), str(speech_16k)]
    result = invoke(*paths, *MODEL, "-f", "text")
    assert result.exit_code == 1
    assert "1 of 3 inputs failed" in result.stderr
    assert result.stderr.count("RTF") == 2


def test_empty_audio_warns_and_exits_0(tmp_path: Path) -> None:
    path = tmp_path / "empty.wav"
    sf.write(path, np.zeros(0, np.float32), 16000)
    result = invoke(str(path), *MODEL, "-f", "text")
    assert result.exit_code == 0
    assert result.stdout == "" and "no audio samples" in result.stderr


def test_usage_errors_exit_2(speech_16k: Path, tmp_path: Path) -> None:
    hotwords = _write(tmp_path / "hot.txt", b"HELLO\n")
    cases = [
        (["--format", "xml"], "--format 'xml' is not known"),
        (["--hotwords", str(hotwords)], "only works with --decoding-method modified_beam_search"),
        (["--decoding-method", "viterbi"], "use one of: greedy_search, modified_beam_search"),
        (["--block-ms", "0"], "--block-ms 0: use a number from 1 to 60000 ms"),
        (["--rule2", "-1"], "--rule2 -1: use a number from 0.01 to 3600 s"),
    ]
    for extra, message in cases:
        result = invoke(str(speech_16k), *MODEL, *extra)
        assert result.exit_code == 2, (extra, result.output)
        assert message in result.stderr


def test_model_errors_exit_1(speech_16k: Path, tmp_path: Path) -> None:
    result = invoke(str(speech_16k), "--model", "no-such-model")
    assert result.exit_code == 1 and "unknown model 'no-such-model'" in result.stderr
    assert "streamasr models list" in result.stderr
    empty = tmp_path / "model"
    empty.mkdir()
    result = invoke(str(speech_16k), "--model", str(empty))
    assert result.exit_code == 1 and "has no tokens.txt" in result.stderr


def test_hotwords_with_beam_search_run(speech_16k: Path, tmp_path: Path) -> None:
    hotwords = _write(tmp_path / "hot.txt", b"HELLO\n")
    result = invoke(
        str(speech_16k), *MODEL, "-f", "text", "--hotwords", str(hotwords),
        "--decoding-method", "modified_beam_search",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip()


def _run_cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", *args],
        capture_output=True, text=True, timeout=120, **kwargs,
    )


def test_subprocess_and_stdin_give_the_same_text_as_the_runner(speech_16k: Path) -> None:
    in_process = invoke(str(speech_16k), *MODEL, "-f", "text").stdout
    by_path = _run_cli("file", str(speech_16k), *MODEL)
    assert by_path.returncode == 0, by_path.stderr
    assert by_path.stdout == in_process  # stdout is not a TTY: text is the default format
    with open(speech_16k, "rb") as stdin:
        by_stdin = _run_cli("file", "-", *MODEL, stdin=stdin)
    assert by_stdin.returncode == 0 and by_stdin.stdout == in_process


def test_quiet_keeps_errors_and_warnings_and_drops_summaries(
    speech_16k: Path, tmp_path: Path
) -> None:
    """A missing input is still one error line (and the count of failures); the inputs that
    run print no summary, nor does --output-dir its line per input."""
    missing = tmp_path / "missing.wav"
    out = tmp_path / "out"
    out.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "streamasr", "file", str(missing), str(speech_16k), *MODEL,
         "--format", "vtt", "--output-dir", str(out), "--quiet"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: {missing}: no such file; check the path",
        "1 of 2 inputs failed",
    ]
    assert (out / f"{speech_16k.stem}.vtt").read_text().startswith("WEBVTT")


def test_ctrl_c_flushes_the_final_and_exits_130(speech_16k: Path, tmp_path: Path) -> None:
    audio, rate = sf.read(str(speech_16k), dtype="float32")
    long_path = tmp_path / "long.wav"
    sf.write(long_path, np.tile(audio, 5), rate)
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamasr.cli", "file", str(long_path), *MODEL,
         "--realtime", "--no-endpoint", "-f", "jsonl"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 60
    first = proc.stdout.readline()  # wait until streaming has produced output
    assert first and time.monotonic() < deadline
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    records = [json.loads(line) for line in [first, *out.splitlines()]]
    finals = [r for r in records if r["type"] == "final"]
    assert len(finals) == 1 and finals[0]["text"]
    assert records[-1]["type"] == "summary"
    assert records[-1]["audio_s"] < 5 * len(audio) / rate  # stopped early
    assert "interrupted" in err


def test_long_file_streams_in_constant_memory(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    """3 minutes of float audio (11.5 MB as float32; 10 minutes, 38 MB, with --long) must not
    raise peak RSS by half its size (measured: +0.6 MB at 4 minutes, +1.2 MB at 10)."""
    rate = 16000
    minutes = 10 if pytestconfig.getoption("--long") else 3
    rng = np.random.default_rng(0)
    short, long = tmp_path / "short.wav", tmp_path / "long.wav"
    sf.write(short, (rng.standard_normal(rate * 20) * 0.01).astype(np.float32), rate, "FLOAT")
    with sf.SoundFile(long, "w", rate, 1, "FLOAT") as out:
        for _ in range(minutes * 6):
            out.write((rng.standard_normal(rate * 10) * 0.01).astype(np.float32))
    peaks = {}
    for name, path in (("short", short), ("long", long)):
        code = (
            "import resource, runpy, sys;"
            f"sys.argv=['streamasr','file',{str(path)!r},'--model','tiny-random-transducer',"
            "'-f','text','--block-ms','1000'];"
            "rc=0\ntry: runpy.run_module('streamasr.cli', run_name='__main__')\n"
            "except SystemExit as e: rc=e.code or 0\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr);"
            "sys.exit(rc)"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        peaks[name] = int(proc.stderr.strip().splitlines()[-1])  # KiB
    whole_kib = rate * 60 * minutes * 4 // 1024  # the long file as float32
    assert peaks["long"] - peaks["short"] < whole_kib // 2, peaks


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_file_mic_and_bench_share_one_model_options_group() -> None:
    """Every option of the group, with its one help text, in each command's --help."""
    from streamasr.commands.options import _SPECS

    env_columns = {"COLUMNS": "400"}
    helps = {}
    for command in ("file", "mic", "bench"):
        done = CliRunner().invoke(app, [command, "--help"], env=env_columns)
        assert done.exit_code == 0, done.output
        helps[command] = re.sub(r"[\s│]+", " ", done.output)
    for spec in _SPECS:
        for command, text in helps.items():
            if command == "bench" and spec.field in ("chunk", "att_context_size"):
                continue  # bench sweeps these itself (lists of values)
            name = spec.decls[0].split("/")[0]
            if command == "mic" and spec.field == "device":
                name = "--compute-device"  # mic's --device is the microphone
            assert f" {name} " in text, (command, name)
            assert re.sub(r"\s+", " ", spec.help).replace("\\[", "[") in text, (command, name)


def test_options_group_refuses_bad_values_before_loading(speech_16k: Path) -> None:
    for args, message in [
        (["--rule2", "nan"], "--rule2 nan: use a number"),
        (["--threads", "0"], "--threads 0: use a number"),
        (["--block-ms", "0.5"], "--block-ms 0.5: use a number"),
        (["--onset-dbfs", "5"], "--onset-dbfs 5: use a level"),
        (["--hotwords-score", "-1"], "--hotwords-score -1: use a number"),
    ]:
        result = invoke(str(speech_16k), *MODEL, *args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
