"""`--ray` on the command line, each case in a fresh process, no cluster needed: what it
takes, what it refuses with one line and exit 2, an address where nothing answers (exit 1,
in seconds), and that commands without --ray never import Ray."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from streamasr.cluster.address import LOCAL, expand_bare_ray

REPO = Path(__file__).resolve().parent.parent
WAV = str(REPO / "models" / "tiny-en" / "test_wavs" / "0.wav")
MODEL = str(REPO / "models" / "tiny-en")


def streamasr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamasr", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def one_error(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.mark.parametrize(("argv", "expected"), [
    (["file", "a.wav", "--ray"], ["file", "a.wav", "--ray", LOCAL]),
    (["file", "--ray", "a.wav", "b.wav"], ["file", "--ray", LOCAL, "a.wav", "b.wav"]),
    (["file", "a.wav", "--ray", "-o", "d"], ["file", "a.wav", "--ray", LOCAL, "-o", "d"]),
    (["bench", "set", "--ray", "auto"], ["bench", "set", "--ray", "auto"]),
    (["bench", "set", "--ray", "ray://head:10001"], ["bench", "set", "--ray", "ray://head:10001"]),
    (["bench", "set", "--ray", "10.0.0.5:6379"], ["bench", "set", "--ray", "10.0.0.5:6379"]),
    (["file", "--", "--ray"], ["file", "--", "--ray"]),
])
def test_a_bare_ray_means_a_cluster_on_this_machine(argv: list[str], expected: list[str]) -> None:
    assert expand_bare_ray(argv) == expected


def test_ray_without_an_output_folder_is_a_usage_error() -> None:
    done = streamasr("file", WAV, "--model", MODEL, "--ray")
    assert done.returncode == 2
    assert "--output-dir" in one_error(done)


def test_a_word_that_is_no_address_is_a_usage_error(tmp_path: Path) -> None:
    done = streamasr("file", WAV, "--model", MODEL, "-o", str(tmp_path), "--ray=head!")
    assert done.returncode == 2
    assert "is not an address" in one_error(done)


def test_stdin_and_realtime_stay_local(tmp_path: Path) -> None:
    done = streamasr("file", "-", "--model", MODEL, "-o", str(tmp_path), "--ray")
    assert done.returncode == 2
    assert "stdin" in one_error(done)
    done = streamasr("file", WAV, "--model", MODEL, "-o", str(tmp_path), "--realtime", "--ray")
    assert done.returncode == 2
    assert "--realtime" in one_error(done)


def test_bench_takes_ray_or_workers_not_both(tmp_path: Path) -> None:
    wavs = str(REPO / "models" / "tiny-en" / "test_wavs")
    done = streamasr("bench", wavs, "--model", MODEL, "--out", str(tmp_path), "--workers", "2",
                     "--ray")
    assert done.returncode == 2
    assert "--workers" in one_error(done)


def test_an_address_where_nothing_answers_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = streamasr("file", WAV, "--model", MODEL, "-o", str(tmp_path), "--ray",
                     f"127.0.0.1:{port}")
    assert done.returncode == 1
    line = one_error(done)
    assert "nothing answers" in line and f"--port {port}" in line
    assert list(tmp_path.iterdir()) == []


def test_commands_without_ray_never_import_it() -> None:
    code = ("import sys; from streamasr.cli import run; "
            "code = run(['file', '--help']); "
            "print('ray' in sys.modules, 'streamasr.cluster.connect' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "False False", done.stdout + done.stderr
