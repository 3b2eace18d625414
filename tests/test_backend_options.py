"""Each backend declares its own options; the commands and the library take them from there.

The energy test engine (energy_backend.py beside this file) declares `frame_ms`, which no
module of streamasr names. Installed as a plugin (a real *.dist-info with an entry point on
PYTHONPATH), its option appears in `file`, `mic` and `bench --help`, is range-checked by the
engine, can be swept by bench; loaded by `--backend module:ATTRIBUTE` it is reached with
`-O frame_ms=N`. Built-in engines refuse each other's options and the plugin's, and the
plugin refuses theirs: exit 2, one line naming the backend that owns the option.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_site import energy_plugin_site

import streamasr
from streamasr.errors import UsageError

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WAV = str(REPO / "models" / "tiny-en" / "test_wavs" / "0.wav")
ENERGY = ("--backend", "energy", "--model", "energy-bursts")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The energy engine installed as the plugin `energy` (its module stays in tests/)."""
    return energy_plugin_site(tmp_path_factory.mktemp("site"))


def cli(site: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    paths = [str(p) for p in (site, HERE, REPO) if p is not None]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "streamasr", *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["file", "mic", "bench"])
def test_a_plugin_option_appears_in_help(site: Path, command: str) -> None:
    done = cli(site, command, "--help")
    assert done.returncode == 0, done.stderr
    assert "--frame-ms" in done.stdout and "energy: Frame length" in done.stdout
    without = cli(None, command, "--help")  # not installed: not offered
    assert "--frame-ms" not in without.stdout and "--chunk" in without.stdout


def test_the_plugin_option_is_range_checked_by_its_engine(site: Path) -> None:
    done = cli(site, "file", WAV, *ENERGY, "--frame-ms", "1000")
    assert done.returncode == 2
    assert "--frame-ms 1000: use a number from 5 to 100 ms" in error_line(done)


def test_the_plugin_option_changes_the_engine(site: Path) -> None:
    frames = {}
    for ms in ("20", "40"):
        done = cli(site, "file", WAV, *ENERGY, "--frame-ms", ms, "-f", "jsonl")
        assert done.returncode == 0, done.stderr
        finals = [json.loads(line) for line in done.stdout.splitlines()]
        times = [t for r in finals if r["type"] == "final" for t in r["token_times_s"]]
        assert times
        frames[ms] = times
    # token times fall on the frame grid the option set
    assert all(abs(t / 0.04 - round(t / 0.04)) < 1e-6 for t in frames["40"])


def test_generic_engine_option_reaches_an_engine_named_by_import_string() -> None:
    base = ("file", WAV, "--backend", "energy_backend:BACKEND", "--model", "energy-bursts")
    ok = cli(None, *base, "-O", "frame_ms=40", "-f", "text")
    assert ok.returncode == 0, ok.stderr
    bad = cli(None, *base, "-O", "frame_ms=3")
    assert bad.returncode == 2 and "--frame-ms 3: use a number" in error_line(bad)
    refused = cli(None, *base, "-O", "chunk=16")
    assert refused.returncode == 2
    assert "belongs to the sherpa-onnx backend" in error_line(refused)


@pytest.mark.parametrize(
    ("args", "owner"),
    [
        (["--frame-ms", "20"], "energy"),  # the plugin's option on a sherpa-onnx model
        ([*ENERGY, "--chunk", "16"], "sherpa-onnx"),
        ([*ENERGY, "--decoding-method", "modified_beam_search"], "sherpa-onnx"),
        ([*ENERGY, "--fp32"], "sherpa-onnx"),
        ([*ENERGY, "--att-context-size", "70,1"], "nemo"),
        ([*ENERGY, "--trust-model-config"], "nemo"),
        (["--trust-model-config"], "nemo"),
    ],
)
def test_an_option_of_another_backend_names_its_owner(
    site: Path, args: list[str], owner: str
) -> None:
    done = cli(site, "file", WAV, *args)
    assert done.returncode == 2
    assert f"belongs to the {owner} backend" in error_line(done)


def test_bench_sweeps_the_plugin_option_with_its_label(site: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"audio_filepath": WAV, "text": "b"}) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    done = cli(site, "bench", str(manifest), *ENERGY, "--frame-ms", "20,40", "--out", str(out))
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [s["name"] for s in doc["settings"]] == ["frame 20", "frame 40"]
    assert [s["output_frame_ms"] for s in doc["settings"]] == [20, 40]
    twice = cli(site, "bench", str(manifest), *ENERGY, "--frame-ms", "20,20", "--out",
                str(tmp_path / "o2"))  # fmt: skip
    assert twice.returncode == 2 and "lists 20 twice" in error_line(twice)


def test_latency_shows_the_plugin_setting(site: Path) -> None:
    done = cli(site, "latency", *ENERGY, "-O", "frame_ms=40", "-f", "json")
    assert done.returncode == 0, done.stderr
    assert "40" in done.stdout and "80" in done.stdout  # 2-frame look-ahead of 40 ms frames


def test_the_library_gets_the_same_checks() -> None:
    with pytest.raises(UsageError, match="belongs to the nemo backend"):
        streamasr.open_model("tiny-en", att_context_size=(70, 1))
    with pytest.raises(UsageError, match="--chunk 0: use a number"):
        streamasr.open_model("tiny-en", chunk=0)
    with pytest.raises(UsageError, match="--threads 0: use a number"):
        streamasr.open_model("tiny-en", threads=0)
    model = streamasr.open_model("tiny-en", chunk=32)
    assert model.info.settings["chunk"] == 32


def test_device_and_precision_an_engine_cannot_use_are_refused() -> None:
    cuda = streamasr.open_model
    with pytest.raises(UsageError, match="run on the CPU only"):
        cuda("tiny-en", device="cuda")
    done = cli(None, "file", WAV, "--fp32")
    assert done.returncode == 2 and "only int8 files" in error_line(done)


def test_bench_advises_fp32_only_where_the_model_has_it(tmp_path: Path) -> None:
    """tiny-en has int8 exports only: its batching note must not advise --fp32 (refused)."""
    dataset = str(REPO / "models" / "tiny-en" / "test_wavs")
    done = cli(None, "bench", dataset, "--streams", "1,2", "--limit", "2", "--out",
               str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    note = " ".join(done.stderr.split())
    assert "not bit-exact with one stream" in note
    assert "no fp32 export: use --streams 1" in note and "--fp32" not in note
