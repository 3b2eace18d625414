"""Plugins fail alone; extreme inputs stay bounded; full and read-only file systems are one line.

Every case runs in a fresh `python -m streamasr.cli` process, as a user runs it, and checks
the exit code, that stderr holds exactly one line of error (never a traceback) and that the
text recognised before a failure still reaches stdout.

Plugins are real installed distributions: a package and its `*.dist-info` (with the
`streamasr.backends` entry point) written into a folder put on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from pulse_fixture import PulseServer, pulse_server

from streamasr.backends.sherpa.hotwords import MAX_HOTWORD_CHARS, MAX_HOTWORDS_BYTES

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TINY_EN = REPO / "models" / "tiny-en"
WAVS = TINY_EN / "test_wavs"
# what the bundled model hears in the bundled clips (tests/test_tiny_en.py pins them)
CLIP_TEXT = {"0": "KEEP UP THE CAR TOMORROW", "1": "WE PLAYS ON A HOUSE ON FRIEND"}

__all__ = ["pulse_server"]  # the fixture, imported for pytest


def cli(
    *args: str,
    stdin: bytes | None = None,
    pythonpath: tuple[Path, ...] = (),
    prefix: tuple[str, ...] = (),
    timeout: float = 300,
) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in (*pythonpath, REPO)))
    return subprocess.run(
        [*prefix, sys.executable, "-m", "streamasr.cli", *args],
        env=env, cwd=REPO, capture_output=True, input=stdin, timeout=timeout,
    )  # fmt: skip


def one_error_line(done: subprocess.CompletedProcess[bytes]) -> str:
    """The single stderr line of a failed run (asserting there is exactly one)."""
    err = done.stderr.decode()
    assert "Traceback" not in err and "Exception ignored" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


def jsonl(done: subprocess.CompletedProcess[bytes]) -> list[dict]:
    """stdout as strict JSON lines (NaN and Infinity are refused)."""

    def strict(token: str) -> None:
        raise AssertionError(f"{token} in JSONL output")

    return [json.loads(line, parse_constant=strict) for line in done.stdout.decode().splitlines()]


def finals(done: subprocess.CompletedProcess[bytes]) -> list[str]:
    return [r["text"] for r in jsonl(done) if r["type"] == "final"]


# --- plugins fail alone ----------------------------------------------------------------------

GOOD = "from energy_backend import BACKEND\n"
CRASH_AT_S = 5.3  # inside the second utterance of the burst clip, after its first token


def crashing(name: str, method: str) -> str:
    """Backend `name`: the energy backend with a stream whose `method` raises once 5.3 s are
    decoded."""
    return f'''
import dataclasses
from energy_backend import BACKEND, EnergyRecognizer, EnergyStream

class Crashing(EnergyStream):
    def {method}(self, *args):
        if self._frames_done * 0.02 >= {CRASH_AT_S}:
            raise RuntimeError("engine crashed")
        return super().{method}(*args)

class Recognizer(EnergyRecognizer):
    def create_stream(self):
        return Crashing()

BACKEND = dataclasses.replace(
    BACKEND, name="{name}", recognises=lambda m: False, load=lambda m, o: Recognizer(o)
)
'''


LOAD_RAISES = '''
import dataclasses
from energy_backend import BACKEND

def _load(model, options):
    raise ValueError("weights file missing")

BACKEND = dataclasses.replace(BACKEND, name="loadfail", recognises=lambda m: False, load=_load)
'''

# entry point name -> (module source, attribute, what the one error line must say)
PLUGINS: dict[str, tuple[str, str, str]] = {
    "energy": (GOOD, "BACKEND", ""),
    "explodes": ('raise RuntimeError("plugin exploded at import")\n', "BACKEND",
                 "RuntimeError: plugin exploded at import"),
    "badsyntax": ("def broken(:\n    pass\n", "BACKEND", "SyntaxError"),
    "noattr": ("VALUE = 1\n", "BACKEND", "AttributeError"),
    "nodep": ("import streamasr_test_no_such_dependency\n", "BACKEND",
              "ModuleNotFoundError: No module named 'streamasr_test_no_such_dependency'"),
    "notentry": ("BACKEND = 42\n", "BACKEND", "is a int, not a streamasr BackendEntry"),
    "loadfail": (LOAD_RAISES, "BACKEND", "ValueError: weights file missing"),
    "crash": (crashing("crash", "decode_step"), "BACKEND", "RuntimeError: engine crashed"),
    "crashhyp": (crashing("crashhyp", "hypothesis"), "BACKEND", "RuntimeError: engine crashed"),
}
BROKEN_AT_LOAD = ("explodes", "badsyntax", "noattr", "nodep", "notentry")


def install_plugin(site: Path, name: str, source: str, attribute: str) -> None:
    """A distribution `streamasr-plugin-NAME` whose module registers backend NAME."""
    module = f"streamasr_plugin_{name}"
    (site / f"{module}.py").write_text(source, encoding="utf-8")
    info = site / f"streamasr_plugin_{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: streamasr-plugin-{name}\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[streamasr.backends]\n{name} = {module}:{attribute}\n", encoding="utf-8"
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every plugin above installed at once, the broken ones beside the good one."""
    folder = tmp_path_factory.mktemp("site")
    for name, (source, attribute, _) in PLUGINS.items():
        install_plugin(folder, name, source, attribute)
    return folder


@pytest.fixture(scope="module")
def burst_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Bursts at 0.5, 1.0, 1.5 s and 5.0, 5.5 s: two utterances for the energy backend."""
    sys.path.insert(0, str(HERE))
    try:
        from test_backend_seam import bursts
    finally:
        sys.path.remove(str(HERE))
    path = tmp_path_factory.mktemp("bursts") / "bursts.wav"
    sf.write(path, bursts(16000, [0.5, 1.0, 1.5, 5.0, 5.5], 7.0), 16000, subtype="PCM_16")
    return path


def plugin_cli(site: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return cli(*args, pythonpath=(site, HERE))


def test_broken_plugins_leave_the_default_model_alone(site: Path) -> None:
    done = plugin_cli(site, "file", str(WAVS / "0.wav"), "-f", "jsonl")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr.decode() == ""  # not a word about the broken plugins
    assert finals(done) == [CLIP_TEXT["0"]]


def test_a_good_plugin_works_beside_broken_ones(site: Path, burst_wav: Path) -> None:
    done = plugin_cli(site, "file", str(burst_wav), "--backend", "energy",
                      "--model", "energy-bursts", "-f", "jsonl")  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert finals(done) == ["B1 B2 B3", "B1 B2"]


def test_an_unknown_backend_lists_plugins_without_importing_them(site: Path) -> None:
    done = plugin_cli(site, "file", str(WAVS / "0.wav"), "--backend", "nosuch")
    assert done.returncode == 2
    line = one_error_line(done)
    assert "sherpa-onnx" in line and "explodes" in line and "energy" in line


@pytest.mark.parametrize("name", [*BROKEN_AT_LOAD, "loadfail"])
def test_a_broken_plugin_is_one_line_naming_it(site: Path, burst_wav: Path, name: str) -> None:
    done = plugin_cli(site, "file", str(burst_wav), "--backend", name,
                      "--model", "energy-bursts", "-f", "jsonl")  # fmt: skip
    assert done.returncode == 1, done.stderr.decode()
    line = one_error_line(done)
    assert f"'{name}'" in line and PLUGINS[name][2] in line, line
    if name in BROKEN_AT_LOAD:  # where it comes from and how to get rid of it
        assert f"pip uninstall streamasr-plugin-{name}" in line, line
    assert done.stdout == b""


@pytest.mark.parametrize("name", ["crash", "crashhyp"])
def test_a_plugin_failing_mid_stream_keeps_what_was_recognised(
    site: Path, burst_wav: Path, name: str
) -> None:
    done = plugin_cli(site, "file", str(burst_wav), "--backend", name,
                      "--model", "energy-bursts", "-f", "jsonl")  # fmt: skip
    assert done.returncode == 1, done.stderr.decode()
    line = one_error_line(done)
    assert f"backend '{name}' failed" in line and "RuntimeError: engine crashed" in line
    records = jsonl(done)
    # the first utterance ended before the crash; the second had one token when it came
    assert [r["text"] for r in records if r["type"] == "final"] == ["B1 B2 B3", "B1"]
    assert records[-1]["type"] == "summary"


def test_a_broken_plugin_is_skipped_when_guessing_the_backend(site: Path) -> None:
    """No built-in backend reads `energy-bursts`: the plugins are asked, a broken one is
    skipped with a warning and the one that recognises the name runs."""
    done = plugin_cli(site, "file", str(WAVS / "0.wav"), "--model", "energy-bursts",
                      "-f", "jsonl")  # fmt: skip
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert "Traceback" not in err
    assert all(line.startswith("WARNING: backend plugin") for line in err.splitlines()), err
    assert {r["type"] for r in jsonl(done)} >= {"summary"}


# --- extreme but allowed inputs stay bounded -------------------------------------------------

# 1024 channels of 64-bit float at 768 kHz: 6.3 GB per second of audio, within every limit
WIDE = dict(channels=1024, rate=768_000, bits=64)
WIDE_BYTES = 200 * 1024 * 1024  # ~32 ms of such audio
PEAK_RSS_MAX_MB = 300  # the model and Python take ~110 MB; a whole 320 ms block would be 2 GB


def wav_header(channels: int, rate: int, bits: int, data_bytes: int, tag: int = 3) -> bytes:
    align = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, rate, (rate * align) & 0xFFFFFFFF, align, bits)
    riff = struct.pack("<I", (36 + data_bytes) & 0xFFFFFFFF)
    chunks = b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", data_bytes)
    return b"RIFF" + riff + b"WAVE" + chunks


PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print(f'peak_rss_kb={peak}', file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def with_peak(*args: str, stdin: bytes) -> tuple[subprocess.CompletedProcess[bytes], float]:
    """Run the CLI; its peak resident memory in MB (the wrapper's own is far smaller)."""
    done = cli(*args, stdin=stdin, prefix=(sys.executable, "-c", PEAK))
    err = done.stderr.decode().strip().splitlines()
    assert err and err[-1].startswith("peak_rss_kb="), done.stderr.decode()
    done.stderr = "\n".join(err[:-1]).encode()
    return done, int(err[-1].split("=")[1]) / 1024


@pytest.mark.parametrize("raw", [False, True], ids=["wav-header", "raw"])
def test_the_widest_allowed_stream_on_stdin_is_decoded_in_bounded_memory(raw: bool) -> None:
    zeros = bytes(WIDE_BYTES)
    if raw:
        args = ["--raw", "f32le", "--rate", "768000", "--channels", "1024"]
        stdin = zeros
        audio_s = WIDE_BYTES / (1024 * 4) / 768_000
    else:
        args = []
        stdin = wav_header(**WIDE, data_bytes=WIDE_BYTES) + zeros
        audio_s = WIDE_BYTES / (1024 * 8) / 768_000
    done, peak_mb = with_peak("file", "-", "-f", "jsonl", *args, stdin=stdin)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""
    summary = jsonl(done)[-1]
    assert summary["type"] == "summary"
    assert summary["audio_s"] == pytest.approx(audio_s, abs=1e-5)
    assert peak_mb < PEAK_RSS_MAX_MB, f"peak RSS {peak_mb:.0f} MB"


def test_a_wide_file_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """1024 channels at 768 kHz from a file (libsndfile): read in slices too."""
    path = tmp_path / "wide.wav"
    frames = 40_000  # 84 MB of 16-bit samples; 160 MB as one float32 block
    with sf.SoundFile(path, "w", samplerate=768_000, channels=1024, subtype="PCM_16") as out:
        out.write(np.zeros((frames, 1024), np.int16))
    done, peak_mb = with_peak("file", str(path), "-f", "jsonl", stdin=b"")
    assert done.returncode == 0, done.stderr.decode()
    assert jsonl(done)[-1]["audio_s"] == pytest.approx(frames / 768_000, abs=1e-5)
    assert peak_mb < 180, f"peak RSS {peak_mb:.0f} MB"


def test_two_wavs_on_stdin_are_two_inputs_transcribed_like_two_files() -> None:
    piped = cli("file", "-", "-f", "jsonl",
                stdin=(WAVS / "0.wav").read_bytes() + (WAVS / "1.wav").read_bytes())  # fmt: skip
    apart = cli("file", str(WAVS / "0.wav"), str(WAVS / "1.wav"), "-f", "jsonl")
    assert piped.returncode == apart.returncode == 0, piped.stderr.decode()
    assert finals(piped) == finals(apart) == [CLIP_TEXT["0"], CLIP_TEXT["1"]]
    summaries = [r for r in jsonl(piped) if r["type"] == "summary"]
    assert [s["source"] for s in summaries] == ["-", "- (WAV stream 2)"]
    assert summaries[1]["audio_s"] == pytest.approx(sf.info(str(WAVS / "1.wav")).duration)


def test_a_second_wav_after_a_closing_chunk_and_at_another_rate() -> None:
    """A LIST chunk after the first stream's data is skipped; the second stream keeps its rate."""
    first = (WAVS / "0.wav").read_bytes()
    listing = b"LIST" + struct.pack("<I", 9) + b"INFOabcde" + b"\0"  # odd size: a pad byte
    audio, rate = sf.read(WAVS / "1.wav", dtype="int16")
    second = wav_header(1, rate * 2, 16, len(audio) * 4, tag=1) + np.repeat(audio, 2).tobytes()
    done = cli("file", "-", "-f", "jsonl", stdin=first + listing + second)
    assert done.returncode == 0, done.stderr.decode()
    assert finals(done)[0] == CLIP_TEXT["0"]
    summaries = [r for r in jsonl(done) if r["type"] == "summary"]
    assert len(summaries) == 2
    assert summaries[1]["audio_s"] == pytest.approx(len(audio) / rate, abs=1e-3)


def test_a_non_wav_after_the_first_stream_is_one_line_after_its_text() -> None:
    first = (WAVS / "0.wav").read_bytes()
    done = cli("file", "-", "-f", "jsonl", stdin=first + b"RIFF\x04\x00\x00\x00AVI ")
    assert done.returncode == 1
    err = done.stderr.decode()
    assert "Traceback" not in err and "not WAV" in err.splitlines()[0], err
    assert finals(done) == [CLIP_TEXT["0"]]


# --- hotword lists are bounded in size and time ----------------------------------------------

BEAM = ("--decoding-method", "modified_beam_search")


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("A" * 2_000_000 + "\n", "larger than such a file can be (at most 1 MiB)"),
        ("A" * 500_000 + "\n", f"line 1 has 500000 characters (at most {MAX_HOTWORD_CHARS})"),
        ("HELLO\nA" + " " * 500_000 + ":1\n", "line 2 has 500003 characters"),
        ("HELLO\n" * (MAX_HOTWORDS_BYTES // 6 + 1), "larger than"),
    ],
    ids=["2MB-line", "500k-word", "500k-spaces", "over-1MiB"],
)
def test_a_huge_hotword_list_is_refused_at_once(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "hot.txt"
    path.write_text(content, encoding="utf-8")
    started = time.monotonic()
    done = cli("file", str(WAVS / "0.wav"), *BEAM, "--hotwords", str(path))
    assert time.monotonic() - started < 60
    assert done.returncode == 2
    line = one_error_line(done)
    assert says in line and str(path) in line


def test_long_lists_are_checked_in_linear_time() -> None:
    from streamasr.backends.sherpa.hotwords import check_phrases
    from streamasr.text.tokens import read_vocabulary

    vocabulary = read_vocabulary(TINY_EN / "tokens.txt")
    phrases = tuple(f"THE CAR {'ON ' * (i % 7)}FRIDAY" for i in range(60_000))
    started = time.monotonic()
    assert check_phrases(phrases, vocabulary).unencodable == ()
    assert time.monotonic() - started < 5


# --- full and read-only file systems ---------------------------------------------------------


def on_tmpfs(mount: Path, options: str, script: str, read_only_after: bool = False) -> list[str]:
    """`script` where `mount` is a private tmpfs (user + mount namespace: read-only or full
    even for root, the host untouched); `read_only_after` remounts it read-only once
    `script`'s setup (`mkdir`) ran."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    mount.mkdir(exist_ok=True)
    setup, _, command = script.partition(" && ")
    remount = f"mount -o remount,ro '{mount}' && " if read_only_after else ""
    script = f"mount -t tmpfs -o {options} tmpfs '{mount}' && {setup} && {remount}{command}"
    return ["unshare", "-rm", "sh", "-c", script]


def run_in(command: list[str]) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, timeout=300)


def streamasr(*args: str) -> str:
    return " ".join([f"'{sys.executable}'", "-m", "streamasr.cli", *(f"'{a}'" for a in args)])


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("set") / "set.jsonl"
    path.write_text(json.dumps({"audio_filepath": str(WAVS / "0.wav"), "text": CLIP_TEXT["0"]})
                    + "\n", encoding="utf-8")  # fmt: skip
    return path


@pytest.mark.parametrize(
    ("options", "read_only", "says"),
    [
        ("size=1m", True, "read-only file system"),
        ("size=1m,nr_inodes=2", False, "no free inodes"),
    ],
    ids=["existing-read-only-folder", "no-free-inodes"],
)
def test_bench_out_on_a_read_only_or_inode_less_file_system(
    manifest: Path, tmp_path: Path, options: str, read_only: bool, says: str
) -> None:
    mount = tmp_path / "m"
    bench = streamasr("bench", str(manifest), "--model", "tiny-en", "--out", f"{mount}/res")
    done = run_in(on_tmpfs(mount, options, f"mkdir '{mount}/res' && {bench}", read_only))
    assert done.returncode == 1, done.stderr.decode()
    line = one_error_line(done)
    assert f"--out {mount}/res" in line and says in line


def test_bench_plot_on_a_full_file_system_is_one_line_after_the_results(
    manifest: Path, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    mount = tmp_path / "m"
    fill = f"head -c 1048576 /dev/zero > '{mount}/fill' 2>/dev/null; true"
    out = tmp_path / "res"
    bench = streamasr("bench", str(manifest), "--model", "tiny-en", "--out", str(out),
                      "--plot", f"{mount}/plot.png")  # fmt: skip
    done = run_in(on_tmpfs(mount, "size=64k", f"{fill} && {bench}"))
    assert done.returncode == 1, done.stderr.decode()
    err = done.stderr.decode()
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"error: --plot {mount}/plot.png"), err
    assert "No space left" in err.strip().splitlines()[-1]
    assert json.loads((out / "results.json").read_text())["settings"]  # the results are kept


def test_hotwords_without_a_usable_temporary_folder_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model without bpe.vocab gets one written to a temporary folder; none can be made (no
    inodes, a full disk): an OutputError naming TMPDIR, not an OSError."""
    import errno
    import tempfile

    from streamasr.backends.sherpa.hotwords import engine_hotword_options
    from streamasr.errors import OutputError
    from streamasr.text.tokens import read_vocabulary

    words = tmp_path / "hot.txt"
    words.write_text("FRIDAY\n", encoding="utf-8")
    model = tmp_path / "model"
    model.mkdir()

    def no_inodes(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryDirectory", no_inodes)
    vocabulary = read_vocabulary(TINY_EN / "tokens.txt")
    with pytest.raises(OutputError, match="--hotwords.*No space left.*TMPDIR"):
        with engine_hotword_options(words, vocabulary, model):
            pass


@pytest.mark.parametrize(
    ("option", "options", "read_only", "code", "says"),
    [
        ("--log", "size=1m,nr_inodes=2", False, 1, "No space left on device"),
        ("--save", "size=1m,nr_inodes=2", False, 1, "No space left on device"),
        ("--log", "size=1m", True, 2, "Read-only file system"),
        ("--save", "size=1m", True, 2, "Read-only file system"),
    ],
    ids=["log-no-inodes", "save-no-inodes", "log-read-only", "save-read-only"],
)
def test_mic_outputs_on_a_file_system_without_inodes_or_read_only(
    pulse_server: PulseServer,
    tmp_path: Path,
    option: str,
    options: str,
    read_only: bool,
    code: int,
    says: str,
) -> None:
    """Refused before capture starts: a full one is a runtime error (1), a read-only one a
    place that cannot be written (usage, 2), as for --save on a missing folder."""
    mount = tmp_path / "m"
    target = f"{mount}/out/session.{'jsonl' if option == '--log' else 'wav'}"
    mic = streamasr("mic", "--device", "pulse", "--model", "tiny-en", "--duration", "2",
                    option, target)  # fmt: skip
    command = on_tmpfs(mount, options, f"mkdir '{mount}/out' && {mic}", read_only)
    done = subprocess.run(command, env=dict(pulse_server.env, PYTHONPATH=str(REPO)), cwd=REPO,
                          capture_output=True, timeout=300)  # fmt: skip
    assert done.returncode == code, done.stderr.decode()
    line = one_error_line(done)
    assert f"{option} {target}" in line and says in line, line


def test_results_files_on_a_disk_that_filled_up_during_the_run(tmp_path: Path) -> None:
    """results.json is written after the last utterance; a disk full by then is one line
    pointing at the records already on disk (/dev/full stands in for the full disk)."""
    from streamasr.bench.outdir import ResultsFolderError, write_result_file

    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    with pytest.raises(ResultsFolderError, match=r"no space left.*utterances\.jsonl"):
        write_result_file(Path("/dev/full"), "{}\n")
