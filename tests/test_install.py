"""streamasr installs like a tool: the wheel carries its demo model and runs from anywhere.

Why: a user who runs `pipx install .` or `pip install streamasr-*.whl` never has the
repository's models/ folder; the first command must still work. The wheel is built with the
standard `build` frontend, installed into a brand-new virtualenv (its dependencies resolved
from the package index, as a user's would be), and the quick start and `models list` run
from a folder outside the checkout. The virtualenv gets no pip of its own (ensurepip costs
~9 s): this Python's pip installs into it (`pip --python`), without byte-compiling every
dependency up front (`--no-compile`; a run compiles what it imports).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# the quick start's sample and what the bundled model makes of it (models/tiny-en/README.md)
QUICK_START_CLIP = "test_wavs/4.wav"
QUICK_START_TEXT = "THE RIGHT TIME TO ACT"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
         str(REPO)],
        check=True, capture_output=True, timeout=300, cwd=out,
    )
    (path,) = out.glob("streamasr-*.whl")
    return path


def test_the_wheel_carries_the_demo_model_and_nothing_test_only(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    model = "streamasr/bundled_models/tiny-en/"
    for needed in ("tokens.txt", "bpe.model", "encoder-epoch-99-avg-1-chunk-16-left-64.int8.onnx",
                   "decoder-epoch-99-avg-1-chunk-16-left-64.onnx", QUICK_START_CLIP):
        assert model + needed in names
    assert not [n for n in names if "tiny-random" in n or "tiny-nemo" in n or "/tests/" in n]
    assert not [n for n in names if n.endswith(("loss.csv", "compare-chunk16.md"))]
    metadata = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))
    ).decode()
    runtime = [line.split(":", 1)[1].strip() for line in metadata.splitlines()
               if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert runtime and all(r.split(">")[0].split("=")[0] != "onnx" for r in runtime), runtime


def test_a_fresh_venv_from_the_wheel_runs_the_quick_start_from_anywhere(
    wheel: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, clear=True).create(env_dir)
    bin_dir = env_dir / "bin"
    # no PYTHONPATH: a checkout on it would be taken for an installed streamasr
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STREAMASR_MODELS")}
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "-q",
         "--no-compile", str(wheel)],
        check=True, capture_output=True, timeout=600, env=env,
    )
    elsewhere = tmp_path / "somewhere-else"
    elsewhere.mkdir()
    env["STREAMASR_HOME"] = str(tmp_path / "cache")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(bin_dir / "streamasr"), *args], capture_output=True, text=True, cwd=elsewhere,
            env=env, timeout=120,
        )

    folder = run("models", "path", "tiny-en")
    assert folder.returncode == 0, folder.stderr
    model_dir = Path(folder.stdout.strip())
    assert model_dir.is_relative_to(env_dir), model_dir  # the installed copy, not the checkout
    done = run("file", str(model_dir / QUICK_START_CLIP), "--format", "text")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == QUICK_START_TEXT
    listed = run("models", "list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)["models"]}
    assert rows["tiny-en"]["installed"] == "bundled"
    assert not [name for name in rows if name.startswith("tiny-random")]
