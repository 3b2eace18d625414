"""Shared fixtures: the bundled real-architecture models and speech made with espeak-ng."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hypothesis import HealthCheck, settings
from warm_nemo import WarmNemo

# Tests never read the developer's own settings (streamasr/config.py): no config file and no
# STREAMASR_MODEL/DEVICE/FORMAT, in this process and in every process a test starts.
os.environ["STREAMASR_CONFIG"] = str(Path(tempfile.mkdtemp(prefix="streamasr-cfg-")) / "none.toml")
for _name in ("STREAMASR_MODEL", "STREAMASR_DEVICE", "STREAMASR_FORMAT"):
    os.environ.pop(_name, None)

# Hypothesis profiles (the property tests, tests/test_fuzz_*.py among them): `ci`, the default,
# runs a fixed set of examples (derandomized: the suite never fails one run and passes the
# next on the same code) with no deadline (a loaded 2-core machine is slow, not wrong);
# `long` explores new random examples, many more of them (HYPOTHESIS_PROFILE=long; the
# command and its figures are in docs/development.md, "Property tests").
_SLOW_IS_FINE = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile(
    "ci", max_examples=100, deadline=None, derandomize=True, suppress_health_check=_SLOW_IS_FINE
)
settings.register_profile(
    "long", max_examples=5000, deadline=None, suppress_health_check=_SLOW_IS_FINE,
    print_blob=True,
)  # fmt: skip
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "models"
# One optimised-graph cache for the whole run, shared by the xdist workers and every process a
# test starts: each model's graphs are optimised once (streamasr/backends/sherpa/graph_cache.py)
os.environ.setdefault("STREAMASR_GRAPH_CACHE_DIR", str(REPO / "build" / "graph-cache"))
# plain words any English model should know; what the bundled model makes of them is
# SPEECH_TRANSCRIPT in test_tiny_en.py
SPEECH_TEXT = "early see create show life and then mother walk seven nine"


# The suite runs on xdist workers (scripts/test.sh: `-n auto --dist loadfile`), one test file
# at a time per worker, so module fixtures (a PulseAudio server, a loaded model) are built once.
# The files that measured slowest start first, so that no long file is left to start last
# while the other workers idle. Files that must not run beside each other (they start
# something a machine holds only once, such as a Ray cluster) share a group: every file
# whose name starts with the group's prefix runs on one worker, one after the other.
SLOW_FILES_FIRST = (  # by what each cost in CI (2026-12-02, junit times; ray: both its files)
    "test_ray_cluster.py", "test_cli_hostile.py", "test_bench_hardening.py",
    "test_untrusted_models.py", "test_latency.py", "test_gpu_flag.py", "test_audio_input.py",
    "test_open_data.py", "test_signals_workers.py", "test_bench_settings.py",
    "test_store_faults.py", "test_chinese.py", "test_store_trust.py", "test_plugins_and_bounds.py",
    "test_mic_pulse.py", "test_combinations.py", "test_progress.py", "test_config.py",
    "test_backend_options.py", "test_punctuation.py", "test_models_reproducible.py",
    "test_cli_file.py", "test_word_truth.py",
)
ONE_WORKER_GROUPS = {"ray": "test_ray"}  # group name: file-name prefix


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--long`: the full variants of tests CI runs at a smaller size (scripts/long_tests.sh)."""
    parser.addoption(
        "--long", action="store_true", default=False,
        help="run the long variants (every committed model regenerated, ...) instead of CI's",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow files first (a stable sort: files and tests otherwise keep their order)."""
    rank = {name: index for index, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: its file, or the group its file belongs to."""
    path = nodeid.split("::", 1)[0]
    name = path.rsplit("/", 1)[-1]
    for group, prefix in ONE_WORKER_GROUPS.items():
        if name.startswith(prefix):
            return group
    return path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadfile`, with the groups above and in collection order (slow files first)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileOrGroupScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # keep the slow-first order of the collection
    return FileOrGroupScheduling(config, log)


def require_tool(name: str) -> str:
    """CI installs these; a missing one is a failure, not a skip."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; run .ci/run or apt-get install it")
    return path


def make_dataset(out: Path, n: int, seed: int) -> Path:
    """Synthesise a test set in all three layouts with scripts/make_dataset.py; returns `out`."""
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_dataset.py"), "--out", str(out),
         "--n", str(n), "--seed", str(seed)],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="session")
def random_transducer() -> Path:
    return MODELS / "tiny-random-transducer"


@pytest.fixture(scope="session")
def random_ctc() -> Path:
    return MODELS / "tiny-random-ctc"


@pytest.fixture(scope="session")
def speech_22k(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """espeak-ng speech at its native 22050 Hz, with 0.5 s of silence in front."""
    espeak = require_tool("espeak-ng")
    out = tmp_path_factory.mktemp("speech") / "raw.wav"
    subprocess.run([espeak, "-v", "en-us", "-w", str(out), SPEECH_TEXT], check=True)
    audio, rate = sf.read(out, dtype="float32")
    padded = np.concatenate([np.zeros(rate // 2, np.float32), audio])
    path = out.with_name("speech-22k.wav")
    sf.write(path, padded, rate, subtype="PCM_16")
    return path


@pytest.fixture(scope="session")
def speech_16k(speech_22k: Path) -> Path:
    """The same speech resampled to 16 kHz mono 16-bit with sox."""
    sox = require_tool("sox")
    path = speech_22k.with_name("speech-16k.wav")
    subprocess.run([sox, str(speech_22k), "-r", "16000", "-b", "16", str(path)], check=True)
    return path


@pytest.fixture(scope="session")
def speech_stereo_44k(speech_22k: Path) -> Path:
    """The same speech as 44.1 kHz stereo float: a format a careless tool gets wrong."""
    sox = require_tool("sox")
    path = speech_22k.with_name("speech-44k-stereo.wav")
    subprocess.run(
        [sox, str(speech_22k), "-r", "44100", "-c", "2", "-e", "floating-point", str(path)],
        check=True,
    )
    return path


# the stop signals whose handling an in-process run changes (cli.run installs its handlers; a
# drained server ignores SIGINT and SIGTERM until it exits)
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def stop_signals_as_they_were() -> Iterator[None]:
    """Each test leaves the worker's stop-signal handling as it found it.

    A disposition left at SIG_IGN is inherited by every process a later test starts: a CLI
    run without cli.run's handlers (or any child) would then ignore the SIGINT the test sends.
    """
    before = {signum: signal.getsignal(signum) for signum in _STOP_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    for signum, handler in before.items():
        if handler is not None and signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """NeMo tests run torch on one thread: its default two threads spin against each other on
    a busy 2-core machine (the tiny model's steps ran tens of times slower), and one thread is
    what a CI runner can count on."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def warm_nemo() -> Iterator[WarmNemo]:
    """CLI runs forked from one process that imported torch and NeMo once per worker
    (tests/warm_nemo.py says what a run keeps of a fresh process, and what it cannot show)."""
    server = WarmNemo()
    yield server
    server.close()


def read_terminal(controller: int) -> bytes:
    """Everything written to a pseudo-terminal until every writer has closed it."""
    seen = bytearray()
    while True:
        try:
            data = os.read(controller, 65536)
        except OSError:  # Linux: EIO once the last writer is gone
            break
        if not data:
            break
        seen.extend(data)
    return bytes(seen)
