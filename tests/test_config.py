"""A real model, once chosen, stays the default: config file, environment, command line.

Why: after `streamasr models pull en --default` every command should use it without
`--model`; the environment overrides the file and an option overrides both. The config file
is hostile input like any other. Each case runs the real CLI in a fresh process with its own
config file and cache.
"""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
from conftest import read_terminal

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "models"
CLIP = MODELS / "tiny-en" / "test_wavs" / "4.wav"
DEMO_HINT = "using the bundled demo model tiny-en"


def run(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, STREAMASR_CONFIG=str(tmp / "config.toml"),
                STREAMASR_HOME=str(tmp / "cache"), PYTHONPATH=str(REPO), **env)
    return subprocess.run([sys.executable, "-m", "streamasr", *args], capture_output=True,
                          text=True, env=full, timeout=120)


def model_of(done: subprocess.CompletedProcess[str]) -> str:
    """The model a `file --format jsonl` run used, from its summary event."""
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    (summary,) = [r for r in rows if r["type"] == "summary"]
    return str(summary.get("model") or summary)


def final_text(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout.strip()


def test_models_default_makes_a_model_the_default_and_the_command_line_still_wins(
    tmp_path: Path,
) -> None:
    # the random model and the demo model give different text for the same clip
    demo = run(tmp_path, "file", str(CLIP), "-f", "text")
    random = run(tmp_path, "file", str(CLIP), "-f", "text", "--model", "tiny-random-transducer")
    assert demo.returncode == random.returncode == 0, demo.stderr + random.stderr
    assert final_text(demo) != final_text(random)

    done = run(tmp_path, "models", "default", "tiny-random-transducer")
    assert done.returncode == 0, done.stderr
    assert "default model: tiny-random-transducer" in done.stderr
    assert 'model = "tiny-random-transducer"' in (tmp_path / "config.toml").read_text()
    assert run(tmp_path, "models", "default").stdout.strip() == "tiny-random-transducer"
    assert final_text(run(tmp_path, "file", str(CLIP), "-f", "text")) == final_text(random)
    # an option wins over the file
    explicit = run(tmp_path, "file", str(CLIP), "-f", "text", "--model", "tiny-en")
    assert final_text(explicit) == final_text(demo)
    # the environment wins over the file
    env = run(tmp_path, "file", str(CLIP), "-f", "text", STREAMASR_MODEL="tiny-en")
    assert final_text(env) == final_text(demo)
    listed = json.loads(run(tmp_path, "models", "list", "-f", "json").stdout)["models"]
    assert [r["name"] for r in listed if r["default"]] == ["tiny-random-transducer"]


def test_pull_default_makes_the_pulled_model_the_default(tmp_path: Path) -> None:
    tarball = tmp_path / "mine.tar.bz2"
    with tarfile.open(tarball, "w:bz2") as tar:
        tar.add(MODELS / "tiny-random-transducer", arcname="mine")
    done = run(tmp_path, "models", "pull", "mine", "--archive", str(tarball), "--default")
    assert done.returncode == 0, done.stderr
    assert "default model: mine" in done.stderr
    random = run(tmp_path, "file", str(CLIP), "-f", "text", "--model", "tiny-random-transducer")
    assert final_text(run(tmp_path, "file", str(CLIP), "-f", "text")) == final_text(random)


def test_the_configured_format_is_used_when_none_is_given(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('format = "jsonl"\n')
    done = run(tmp_path, "file", str(CLIP))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["type"] == "summary"
    text = run(tmp_path, "file", str(CLIP), STREAMASR_FORMAT="text")
    assert not text.stdout.startswith("{")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("model = [", "not valid TOML"),
        ('colour = "blue"\n', "unknown key 'colour'; the keys are model, device, format, hints"),
        ("model = 3\n", "model must be a non-empty string"),
        ('hints = "no"\n', "hints must be true or false"),
        ('format = "html"\n', "format 'html' from the config"),
        ("x" * (70 << 10), "larger than such a file can be (at most 64 KiB)"),
        (b"\xff\xfe model", "not valid TOML"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_the_file(
    tmp_path: Path, content: str | bytes, message: str
) -> None:
    path = tmp_path / "config.toml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    done = run(tmp_path, "file", str(CLIP))
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and str(path) in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_models_default_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    not_pulled = run(tmp_path, "models", "default", "en")
    assert not_pulled.returncode == 2
    assert "streamasr models pull en --default" in not_pulled.stderr
    unknown = run(tmp_path, "models", "default", "englsh")
    assert unknown.returncode == 2 and "did you mean" in unknown.stderr
    assert not (tmp_path / "config.toml").exists()


def stderr_on_a_terminal(
    tmp_path: Path, *args: str, config: str = "", columns: int = 200
) -> str:
    """What `file CLIP -f text ARGS` writes to stderr when it is a terminal."""
    (tmp_path / "config.toml").write_text(config)
    controller, terminal = pty.openpty()
    env = dict(os.environ, STREAMASR_CONFIG=str(tmp_path / "config.toml"),
               PYTHONPATH=str(REPO), COLUMNS=str(columns))
    proc = subprocess.Popen([sys.executable, "-m", "streamasr", "file", str(CLIP),
                             "-f", "text", *args], stdout=subprocess.DEVNULL,
                            stderr=terminal, env=env)
    os.close(terminal)
    chunks = [read_terminal(controller)]
    assert proc.wait(timeout=120) == 0
    os.close(controller)
    return re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode(errors="replace"))


def test_a_terminal_user_on_the_demo_model_is_told_how_to_get_a_real_one(tmp_path: Path) -> None:
    hinted = stderr_on_a_terminal(tmp_path)
    assert DEMO_HINT in hinted and "streamasr models pull en --default" in hinted
    assert DEMO_HINT not in stderr_on_a_terminal(tmp_path, "--model", "tiny-en")
    assert DEMO_HINT not in stderr_on_a_terminal(tmp_path, config="hints = false\n")
    # not on a terminal: no hint (the output of scripts stays as it was)
    assert DEMO_HINT not in run(tmp_path, "file", str(CLIP), "-f", "text").stderr


def test_the_demo_model_hint_wraps_between_words_at_80_columns(tmp_path: Path) -> None:
    """Rich wraps it at the terminal's width, between words; left to the terminal, a line
    longer than the screen broke inside words ("stream / asr")."""
    # a folder whose config path fits on one line (pytest's own folders under xdist can be
    # longer than 80 characters, which no wrapping can keep whole)
    short = Path(tempfile.mkdtemp(prefix="cfg"))
    try:
        screen = stderr_on_a_terminal(short, columns=80)
    finally:
        shutil.rmtree(short)
    tmp_path = short
    found = re.search(re.escape(DEMO_HINT) + r".*?hides\s+this\)", screen, re.DOTALL)
    assert found, screen
    hint = found.group(0)
    lines = hint.splitlines()
    assert len(lines) > 1 and max(len(line.rstrip()) for line in lines) <= 80, hint
    words = " ".join(hint.split())
    assert "for a real one: streamasr models pull en --default (hints = false in" in words
    assert f"{tmp_path / 'config.toml'} hides this)" in words
