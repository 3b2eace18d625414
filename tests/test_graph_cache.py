"""The optimised-graph cache: same decodes as the original graphs, damaged entries rebuilt,
the opt-out honoured, entries keyed on the source bytes. Real sherpa-onnx on models/tiny-en."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import soundfile as sf

from streamasr.api import open_model
from streamasr.backends.sherpa import graph_cache
from streamasr.backends.sherpa.modeldir import resolve_model

REPO = Path(__file__).resolve().parent.parent
TINY_EN = REPO / "models" / "tiny-en"
CLIPS = sorted((TINY_EN / "test_wavs").glob("*.wav"))


@pytest.fixture
def cache_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Point the cache (in this process and the processes it starts) at a folder."""

    def use(folder: Path) -> Path:
        monkeypatch.setenv(graph_cache.ENV_DIR, str(folder))
        monkeypatch.delenv(graph_cache.ENV_SWITCH, raising=False)
        return folder

    yield use


def file_run_with_cache(folder: Path) -> subprocess.CompletedProcess:
    """`streamasr file` on the first clip in a fresh process, its graph cache in `folder`."""
    env = {**os.environ, graph_cache.ENV_DIR: str(folder)}
    env.pop(graph_cache.ENV_SWITCH, None)
    return subprocess.run(
        [sys.executable, "-m", "streamasr", "file", str(CLIPS[0])],
        capture_output=True, text=True, env=env, check=False,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache holding tiny-en's optimised graphs, built by a real `streamasr file` run."""
    folder = tmp_path_factory.mktemp("graphs")
    run = file_run_with_cache(folder)
    assert run.returncode == 0, run.stderr
    return folder


def tiny_en_sources() -> list[Path]:
    return list(resolve_model("tiny-en").onnx_files())


def entries(folder: Path) -> dict[str, dict]:
    return {
        p.name: json.loads((p / graph_cache.ENTRY_FILE).read_text())
        for p in folder.iterdir()
        if (p / graph_cache.ENTRY_FILE).is_file()
    }


def joiner_entry(folder: Path) -> Path:
    """The joiner's entry: the smallest graph, so rebuilding it is quick."""
    name = next(k for k, v in entries(folder).items() if v["source"].startswith("joiner"))
    return folder / name


def transcripts() -> list[tuple[str, tuple[str, ...]]]:
    model = open_model("tiny-en", threads=1)
    out = []
    for clip in CLIPS:
        audio, rate = sf.read(clip, dtype="float32")
        summary = model.transcribe(audio, rate)
        out.append((summary.text, tuple(t for f in summary.finals for t in f.tokens)))
    return out


def test_a_ctc_model_decodes_the_same_tokens_from_its_cached_graph(
    tmp_path: Path, cache_at: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = cache_at(tmp_path / "graphs")  # type: ignore[operator]
    ctc = REPO / "models" / "tiny-random-ctc"
    audio, rate = sf.read(CLIPS[1], dtype="float32")

    def decode() -> tuple[str, tuple[str, ...]]:
        summary = open_model(str(ctc), threads=1).transcribe(audio, rate)
        return summary.text, tuple(t for f in summary.finals for t in f.tokens)

    cached = decode()
    assert len(entries(folder)) == 1 and "failed" not in next(iter(entries(folder).values()))
    monkeypatch.setenv(graph_cache.ENV_SWITCH, "0")
    assert cached[1] and cached == decode()


def test_every_graph_of_the_model_is_cached_once(built: Path) -> None:
    found = entries(built)
    assert sorted(v["source"] for v in found.values()) == sorted(p.name for p in tiny_en_sources())
    assert all("failed" not in v and v["ort_version"] == graph_cache.ort_version()
               for v in found.values())
    assert not [p for p in built.iterdir() if p.name.startswith(".build-")]


def test_cached_graphs_decode_the_same_tokens_as_the_originals(
    built: Path, cache_at: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache_at(built)  # type: ignore[operator]
    assert graph_cache.optimised_paths(tiny_en_sources()) != tiny_en_sources()
    cached = transcripts()
    monkeypatch.setenv(graph_cache.ENV_SWITCH, "0")
    original = transcripts()
    assert cached == original
    assert all(text for text, _ in original)


@pytest.mark.parametrize("damage", ["truncate", "flip", "record"])
def test_a_damaged_entry_is_rebuilt_with_a_warning(
    built: Path, tmp_path: Path, damage: str, cache_at: object,
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder = cache_at(shutil.copytree(built, tmp_path / "graphs"))  # type: ignore[operator]
    entry = joiner_entry(folder)
    graph = entry / graph_cache.GRAPH_FILE
    data = graph.read_bytes()
    if damage == "truncate":
        graph.write_bytes(data[: len(data) // 2])
    elif damage == "flip":  # same size, one byte changed
        graph.write_bytes(data[:1000] + bytes([data[1000] ^ 0xFF]) + data[1001:])
    else:
        (entry / graph_cache.ENTRY_FILE).write_text("{not json")
    with caplog.at_level("WARNING", logger="streamasr"):
        paths = graph_cache.optimised_paths(tiny_en_sources())
    assert f"graph cache entry {entry} is damaged" in caplog.text
    assert graph in paths and graph.read_bytes() == data  # rebuilt, same bytes as before
    assert graph_cache.file_sha256(graph) == entries(folder)[entry.name]["sha256"]


def test_a_truncated_entry_does_not_stop_the_command(built: Path, tmp_path: Path) -> None:
    folder = shutil.copytree(built, tmp_path / "graphs")
    graph = joiner_entry(folder) / graph_cache.GRAPH_FILE
    graph.write_bytes(graph.read_bytes()[:4096])
    run = file_run_with_cache(folder)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip()
    assert "is damaged" in run.stderr and "rebuilding it" in run.stderr
    assert graph.stat().st_size == entries(folder)[graph.parent.name]["bytes"]


def test_switched_off_the_cache_writes_nothing(tmp_path: Path, cache_at: object,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    folder = cache_at(tmp_path / "graphs")  # type: ignore[operator]
    monkeypatch.setenv(graph_cache.ENV_SWITCH, "0")
    assert graph_cache.optimised_paths(tiny_en_sources()) == tiny_en_sources()
    assert not folder.exists()


def test_the_key_follows_the_source_bytes(tmp_path: Path, cache_at: object) -> None:
    folder = cache_at(tmp_path / "graphs")  # type: ignore[operator]
    joiner = next(p for p in tiny_en_sources() if p.name.startswith("joiner"))
    copy = tmp_path / joiner.name
    shutil.copy(joiner, copy)
    first = graph_cache.optimised_paths([copy])[0]
    assert first.parent.parent == folder
    assert graph_cache.optimised_paths([copy]) == [first]  # a hit: the same entry
    with copy.open("ab") as handle:  # an unknown protobuf field: still ONNX, other sha256
        handle.write(b"\xa2\x06\x01x")
    second = graph_cache.optimised_paths([copy])[0]
    assert second.parent.parent == folder and second.parent != first.parent


def test_a_source_edited_in_place_is_hashed_again(tmp_path: Path, cache_at: object) -> None:
    """Same size, the mtime set back: the remembered sha256 is not used (ctime moved)."""
    folder = cache_at(tmp_path / "graphs")  # type: ignore[operator]
    joiner = next(p for p in tiny_en_sources() if p.name.startswith("joiner"))
    copy = tmp_path / joiner.name
    copy.write_bytes(joiner.read_bytes() + b"\xa2\x06\x01x")  # an unknown field: still ONNX
    first = graph_cache.optimised_paths([copy])[0]
    assert first.parent.parent == folder
    before = copy.stat()
    copy.write_bytes(joiner.read_bytes() + b"\xa2\x06\x01y")
    os.utime(copy, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert copy.stat().st_size == before.st_size and copy.stat().st_mtime_ns == before.st_mtime_ns
    assert graph_cache.source_sha256(copy, folder) == graph_cache.file_sha256(copy)
    second = graph_cache.optimised_paths([copy])[0]
    assert second.parent.parent == folder and second.parent != first.parent


MODULES_AFTER_FILE = """
import json, sys
from streamasr.cli import run
code = run(sys.argv[2:])
json.dump(sorted(sys.modules), open(sys.argv[1], "w"))
sys.exit(code)
"""


def test_a_warm_cache_hashes_nothing(built: Path, tmp_path: Path) -> None:
    """With every entry and source seen before, a load only stats files: no model file is
    read whole, and OpenSSL's hashlib (3.5 MB resident) is not even imported."""
    env = {**os.environ, graph_cache.ENV_DIR: str(built)}
    env.pop(graph_cache.ENV_SWITCH, None)
    record = tmp_path / "modules.json"
    run = subprocess.run(
        [sys.executable, "-c", MODULES_AFTER_FILE, str(record), "file", str(CLIPS[0])],
        cwd=REPO, capture_output=True, text=True, env=env, check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip()
    modules = set(json.loads(record.read_text()))
    assert "streamasr.backends.sherpa.graph_cache" in modules  # the cache was used
    assert not {"hashlib", "_hashlib"} & modules


def test_a_file_onnx_runtime_cannot_optimise_is_loaded_as_it_is_and_not_retried(
    tmp_path: Path, cache_at: object
) -> None:
    folder = cache_at(tmp_path / "graphs")  # type: ignore[operator]
    bad = tmp_path / "not-a-model.onnx"
    bad.write_bytes(b"this is not ONNX")
    assert graph_cache.optimised_paths([bad]) == [bad]
    (record,) = entries(folder).values()
    assert record["failed"]
    assert graph_cache.optimised_paths([bad]) == [bad]
    assert len(entries(folder)) == 1


def test_models_pull_leaves_the_graphs_optimised(tmp_path: Path) -> None:
    source = REPO / "models" / "tiny-random-ctc"
    tarball = tmp_path / "my-ctc.tar.bz2"
    with tarfile.open(tarball, "w:bz2") as tar:
        tar.add(source, arcname="my-ctc")
    folder = tmp_path / "graphs"
    env = {**os.environ, graph_cache.ENV_DIR: str(folder), "STREAMASR_HOME": str(tmp_path)}
    env.pop(graph_cache.ENV_SWITCH, None)
    pulled = subprocess.run(
        [sys.executable, "-m", "streamasr", "models", "pull", "my-ctc", "--archive",
         str(tarball)], capture_output=True, text=True, env=env, check=False,
    )
    assert pulled.returncode == 0, pulled.stderr
    (record,) = entries(folder).values()
    assert record["source"] == "ctc-epoch-0-avg-1-chunk-16-left-64.onnx"
    assert "failed" not in record


def test_a_graph_the_engine_refuses_falls_back_to_the_original_once(
    tmp_path: Path, cache_at: object, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An entry whose bytes match its record but that sherpa-onnx cannot load (as a graph from
    an ONNX Runtime that differs in build but not in version would be)."""
    folder = cache_at(tmp_path / "graphs")  # type: ignore[operator]
    ctc = REPO / "models" / "tiny-random-ctc"
    (source,) = resolve_model(str(ctc)).onnx_files()
    entry = folder / graph_cache.entry_key(graph_cache.file_sha256(source),
                                           str(graph_cache.ort_version()),
                                           graph_cache.rewrite_key())
    entry.mkdir(parents=True)
    junk = b"not a graph sherpa-onnx can load"
    (entry / graph_cache.GRAPH_FILE).write_bytes(junk)
    (entry / graph_cache.ENTRY_FILE).write_text(json.dumps({
        "source": source.name, "bytes": len(junk),
        "sha256": graph_cache.file_sha256(entry / graph_cache.GRAPH_FILE)}))
    audio, rate = sf.read(CLIPS[1], dtype="float32")
    with caplog.at_level("WARNING", logger="streamasr"):
        text = open_model(str(ctc), threads=1).transcribe(audio, rate).text
    assert "refused the cached optimised graphs" in caplog.text
    assert entries(folder)[entry.name]["failed"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="streamasr"):
        assert open_model(str(ctc), threads=1).transcribe(audio, rate).text == text
    assert "refused" not in caplog.text
    monkeypatch.setenv(graph_cache.ENV_SWITCH, "0")
    assert open_model(str(ctc), threads=1).transcribe(audio, rate).text == text
