"""Shell completion: the script installs for bash and completes commands and subcommands.

Why: a CLI with a dozen commands and many options is typed faster with Tab; Typer's own
completion is on, and this checks it answers the way bash will ask it (a fresh process with
the completion variables set, as the installed script runs it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def complete(*words: str) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), _STREAMASR_COMPLETE="complete_bash",
               COMP_WORDS=" ".join(("streamasr", *words)), COMP_CWORD=str(len(words)))
    done = subprocess.run([sys.executable, "-m", "streamasr"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_bash_script_is_shown_for_the_streamasr_command() -> None:
    done = subprocess.run([sys.executable, "-m", "streamasr", "--show-completion", "bash"],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    assert "complete -o default -F _streamasr_completion streamasr" in done.stdout


def test_commands_subcommands_and_options_complete() -> None:
    assert complete("mo") == ["models"]
    assert sorted(complete("models", "p")) == ["path", "pull"]
    assert "--chunk" in complete("file", "--ch")
