"""The NeMo backend's refusals, its import hygiene, and the tiny models' reproducibility."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from streamasr.backends.nemo.engine import NemoRecognizer
from streamasr.cuda import GPU_INSTALL
from streamasr.errors import DependencyError, ModelError, UsageError

REPO = Path(__file__).resolve().parent.parent
STREAMING = REPO / "models" / "tiny-nemo-streaming" / "tiny-nemo-streaming.nemo"


# one torch thread for every test here (the fixture in conftest.py says why)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_untrained_lookahead_is_refused_with_the_trained_list():
    with pytest.raises(UsageError) as err:
        NemoRecognizer(STREAMING, "cpu", (70, 3), "ctc")
    assert str(err.value) == (
        "--att-context-size 70,3 was not trained into tiny-nemo-streaming.nemo; "
        "use one of: 70,13, 70,6, 70,1, 70,0"
    )


def test_unknown_decoder_is_refused():
    with pytest.raises(UsageError, match="--decoder tdt is not available .* use one of: rnnt, ctc"):
        NemoRecognizer(STREAMING, "cpu", None, "tdt")


def test_defaults_and_settings_read_from_the_model():
    rec = NemoRecognizer(STREAMING, "cpu")
    assert rec.att_context_size == [70, 13]  # the first trained look-ahead is NeMo's default
    assert rec.decoder == "rnnt"
    assert rec.chunk_s == pytest.approx(1.12)
    assert rec.lookahead_s == pytest.approx(1.04)
    fast = NemoRecognizer(STREAMING, "cpu", (70, 0), "ctc")
    assert (fast.chunk_s, fast.lookahead_s) == (pytest.approx(0.08), 0.0)
    assert "att_context_size [70,0]: chunk 80 ms, look-ahead 0 ms, ctc greedy" in (fast.description)


def test_cuda_without_a_gpu_says_which_and_the_fix():
    import torch

    if torch.cuda.is_available():  # a GPU machine: the same request must just work
        assert NemoRecognizer(STREAMING, "cuda").device == "cuda"
        return
    with pytest.raises(DependencyError) as err:
        NemoRecognizer(STREAMING, "cuda")
    message = str(err.value)
    assert message.startswith("CUDA is not available (torch ")
    assert GPU_INSTALL in message and "\n" not in message


def test_missing_model_file_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="does not exist; give a .nemo file"):
        NemoRecognizer(tmp_path / "nothing.nemo")
    broken = tmp_path / "broken.nemo"
    broken.write_bytes(b"not a tar archive")
    with pytest.raises(ModelError, match="NeMo could not load .* complete .nemo file"):
        NemoRecognizer(broken)


def test_bad_device_name_is_a_usage_error():
    with pytest.raises(UsageError, match="--device 'gpu0' is not a device"):
        NemoRecognizer(STREAMING, "gpu0")


def test_importing_the_backend_needs_neither_torch_nor_nemo():
    code = (
        "import sys, streamasr, streamasr.backends.nemo.engine, streamasr.backends.nemo.features\n"
        "print(sorted(m for m in ('torch', 'nemo') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]"


def test_without_nemo_installed_the_error_names_the_extra(tmp_path):
    # a fresh interpreter where `nemo` cannot be imported, as on a CPU-only install
    (tmp_path / "nemo").mkdir()
    (tmp_path / "nemo" / "__init__.py").write_text("raise ImportError('no nemo here')\n")
    code = (
        "from streamasr.backends.nemo.engine import NemoRecognizer\n"
        "from streamasr.errors import DependencyError\n"
        "try:\n"
        f"    NemoRecognizer({str(STREAMING)!r})\n"
        "except DependencyError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"},
    )
    assert "needs nemo_toolkit[asr], which is not installed" in out.stdout
    assert f"run: {GPU_INSTALL}" in out.stdout


def test_make_script_rebuilds_the_bundled_weights_and_tokenizer(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "make_tiny_nemo_models", REPO / "scripts" / "make_tiny_nemo_models.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    tokenizer_dir = script.train_tokenizer(tmp_path)
    rebuilt = script.build(tokenizer_dir, band=False)
    bundled = NemoRecognizer(STREAMING, "cpu").model
    assert script.weights_sha256(rebuilt) == script.weights_sha256(bundled)
    assert rebuilt.tokenizer.ids_to_tokens(list(range(rebuilt.tokenizer.vocab_size))) == (
        bundled.tokenizer.ids_to_tokens(list(range(bundled.tokenizer.vocab_size)))
    )


def test_threads_are_checked_and_applied():
    import torch

    with pytest.raises(UsageError, match="--threads must be at least 1, got 0"):
        NemoRecognizer(STREAMING, "cpu", threads=0)
    NemoRecognizer(STREAMING, "cpu", threads=1)
    assert torch.get_num_threads() == 1
