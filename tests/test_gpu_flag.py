"""`--gpu`, `--backend nemo --device`, `--att-context-size` and `--decoder` on the command line.

Each case runs the CLI in a process of its own, as a user would, on the tiny cache-aware NeMo
model in models/ (real NeMo on CPU torch) or the bundled sherpa-onnx one. The runs that load
the .nemo are forked from one process that imported torch and NeMo once (`warm_nemo`,
tests/warm_nemo.py); the rest start a fresh interpreter: they check what happens before torch
is imported (a hidden torch or nemo, no CUDA found by the driver) or run `--gpu`, which on a
GPU machine must start CUDA in a process that never forked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from warm_nemo import WarmNemo

from streamasr.text.tokens import split_words

REPO = Path(__file__).resolve().parent.parent
NEMO_MODEL = "models/tiny-nemo-streaming/tiny-nemo-streaming.nemo"
WAV = "models/tiny-en/test_wavs/1.wav"
TRAINED = "70,13, 70,6, 70,1, 70,0"
# works from an install and from a clone; 'streamasr[gpu]' is on no package index
GPU_EXTRA = (
    "pip install torch 'nemo_toolkit[asr]' (with pipx: pipx inject streamasr torch "
    "'nemo_toolkit[asr]'); in a clone: pip install -e '.[gpu]'"
)


def cli(
    *args: str, python_prefix: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """The CLI in a fresh process; `python_prefix` runs first in it (to hide a package), and
    `env` adds environment variables (e.g. a cache of its own)."""
    code = python_prefix + "from streamasr.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=dict(os.environ, PYTHONPATH=str(REPO), **(env or {})),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_error_line(done: subprocess.CompletedProcess) -> str:
    """The single `error:` line a bad request must give: no traceback, nothing on stdout."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def cuda(warm_nemo: WarmNemo) -> bool:
    """Whether torch sees a CUDA device, asked in a fork (this process never imports torch)."""
    done = warm_nemo.python("import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)")
    assert done.returncode in (0, 3), done.stderr
    return done.returncode == 0


@pytest.mark.parametrize("command", ["file", "mic"])
def test_gpu_without_cuda_says_which_and_the_fix(command: str, cuda: bool) -> None:
    args = [WAV] if command == "file" else ["--duration", "1"]
    done = cli(command, *args, "--gpu", "--model", NEMO_MODEL, "-f", "jsonl")
    if cuda:  # a machine with a GPU: --gpu must really load the model there
        if command == "file":
            assert done.returncode == 0, done.stderr
            assert '"type": "final"' in done.stdout
        else:  # past the engine, on to the audio input (none on a GPU server)
            assert "CUDA" not in done.stderr and "Traceback" not in done.stderr
        return
    assert done.returncode == 1, done.stderr  # the command line is right; this machine lacks CUDA
    line = one_error_line(done)
    assert "CUDA is not available" in line and GPU_EXTRA in line and "--device cpu" in line


def test_gpu_without_the_extra_installed_says_how_to_install() -> None:
    # an import of nemo fails exactly as it does where nemo_toolkit is not installed
    hide = "import sys; sys.modules['nemo'] = None\n"
    done = cli("file", WAV, "--backend", "nemo", "--device", "cpu", "--model", NEMO_MODEL,
               python_prefix=hide)
    assert done.returncode == 1, done.stderr
    line = one_error_line(done)
    assert "nemo_toolkit" in line and GPU_EXTRA in line


def test_nemo_on_cpu_streams_a_file_and_prints_text(warm_nemo: WarmNemo) -> None:
    done = warm_nemo.cli("file", WAV, "--backend", "nemo", "--device", "cpu", "--model",
                         NEMO_MODEL, "--att-context-size", "70,1", "-f", "jsonl", timeout=300)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    finals = [r for r in records if r["type"] == "final"]
    assert finals and any(f["text"].strip() for f in finals)
    # FastConformer emits every 80 ms: token times fall on that grid, not Zipformer's 40 ms
    times = [t for f in finals for t in f["token_times_s"]]
    assert times and all(abs(t / 0.08 - round(t / 0.08)) < 1e-6 for t in times)
    # the words are the text's (one split for every output: tests/test_word_truth.py)
    assert all([w["text"] for w in f["words"]] == split_words(f["text"]) for f in finals)
    summary = records[-1]
    assert summary["type"] == "summary"


def test_ctc_decoder_of_the_hybrid_model_runs(warm_nemo: WarmNemo) -> None:
    done = warm_nemo.cli("file", WAV, "--model", NEMO_MODEL, "--decoder", "ctc", "-f", "text",
                         timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_an_untrained_look_ahead_is_refused_with_the_trained_list(warm_nemo: WarmNemo) -> None:
    done = warm_nemo.cli("file", WAV, "--backend", "nemo", "--device", "cpu", "--model",
                         NEMO_MODEL, "--att-context-size", "70,2", timeout=300)
    assert done.returncode == 2, done.stderr
    line = one_error_line(done)
    assert "70,2" in line and f"use one of: {TRAINED}" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "tiny-en", "--att-context-size", "70,1"],
         "--att-context-size is for NeMo models; for this sherpa-onnx model the equivalent is "
         "--chunk"),
        (["--model", NEMO_MODEL, "--chunk", "16"],
         "for this NeMo model the equivalent is --att-context-size"),
        (["--model", "tiny-en", "--decoder", "ctc"], "this is a sherpa-onnx model"),
        (["--model", NEMO_MODEL, "--decoding-method", "modified_beam_search"],
         "the NeMo backend decodes with greedy search only"),
        (["--model", NEMO_MODEL, "--decoder", "attention"], "--decoder 'attention': use one of"),
        (["--model", NEMO_MODEL, "--att-context-size", "70"], "give two whole numbers L,R"),
        (["--gpu", "--backend", "sherpa-onnx"], "--gpu runs the nemo backend"),
        (["--gpu", "--device", "cpu"], "--gpu runs on CUDA, not on cpu"),
        (["--device", "tpu"], "compute device 'tpu' is not known; use cpu, cuda or cuda:N"),
    ],
)
def test_settings_of_the_other_engine_are_usage_errors(args: list[str], message: str) -> None:
    done = cli("file", WAV, *args)
    assert done.returncode == 2, done.stderr
    assert message in one_error_line(done)


def test_mic_takes_the_engine_device_as_compute_device() -> None:
    """mic's --device is the input device; the engine's is --compute-device."""
    done = cli("mic", "--compute-device", "tpu")
    assert done.returncode == 2, done.stderr
    assert "compute device 'tpu' is not known" in one_error_line(done)
    gpu = cli("mic", "--gpu", "--compute-device", "cpu")
    assert gpu.returncode == 2 and "--gpu runs on CUDA, not on cpu" in one_error_line(gpu)


def test_gpu_without_a_model_runs_the_default_released_model_or_says_how_to_get_it(
    tmp_path: Path, cuda: bool
) -> None:
    """`streamasr file x.wav --gpu` names no model: the NeMo default is NVIDIA's released
    multi-look-ahead model. Without CUDA that is said first; on the CPU, an empty cache
    says how to pull it."""
    env_home = {"STREAMASR_HOME": str(tmp_path / "empty-cache")}
    if not cuda:
        gpu = cli("file", WAV, "--gpu", env=env_home)
        assert gpu.returncode == 1 and "CUDA is not available" in one_error_line(gpu)
    cpu = cli("file", WAV, "--backend", "nemo", "--device", "cpu", env=env_home)
    assert cpu.returncode == 1, cpu.stderr
    line = one_error_line(cpu)
    assert "streamasr models pull stt_en_fastconformer_hybrid_large_streaming_multi" in line



def test_no_cuda_is_said_before_torch_or_nemo_is_needed(cuda: bool) -> None:
    """Without a GPU, --gpu must not first ask for (or import) 2 GB of torch and NeMo."""
    if cuda:
        return  # a GPU machine goes on to load the engine; covered above
    hide = "import sys; sys.modules['torch'] = None; sys.modules['nemo'] = None\n"
    done = cli("file", WAV, "--gpu", "--model", NEMO_MODEL, python_prefix=hide)
    assert done.returncode == 1, done.stderr
    line = one_error_line(done)
    assert "CUDA is not available: no NVIDIA GPU or driver found" in line
    assert GPU_EXTRA in line and "--device cpu" in line
