"""`file --ray` and `bench --ray` on a real three-node Ray cluster on 127.0.0.1 (a head and two
worker nodes, each its own `ray start` process with one CPU): the same outputs and the same
scores as a local run, a node that dies mid-run costs nothing but time, a node whose model
copy differs from the driver's refuses to decode, and a node without a released model pulls
it into its own cache, held to the driver's checksum; a Ray agent dying on the driver's own
node ends the run in one line, the finished rows kept."""

from __future__ import annotations

import io
import json
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_fixture import REPO, Cluster, start_cluster
from test_store import ArchiveServer

from streamasr.distribution import catalog

WAVS = REPO / "models" / "tiny-en" / "test_wavs"
MODEL = str(REPO / "models" / "tiny-en")
FORMATS = "txt,srt,vtt,jsonl"
RUN_LIMIT_S = 300
# what differs between two runs of the same audio: the clocks
CLOCK_FIELDS = ("wall_s", "compute_s", "rtf", "first_token_wall_latency_s", "wall_latency_s")


def streamasr(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamasr", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=RUN_LIMIT_S)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    running = start_cluster(workers=2)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def local_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled clips through a local `file -o`: what a cluster run must write."""
    out = tmp_path_factory.mktemp("local-files")
    done = streamasr("file", *sorted(map(str, WAVS.glob("*.wav"))), "--model", MODEL,
                     "-o", str(out), "--format", FORMATS)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def local_bench(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("local-bench")
    done = streamasr("bench", str(WAVS), "--model", MODEL, "--out", str(out))
    assert done.returncode == 0, done.stderr
    return json.loads((out / "results.json").read_text())


def without_clocks(line: str) -> dict[str, Any]:
    event = json.loads(line)
    return {k: v for k, v in event.items() if k not in CLOCK_FIELDS}


def copies(folder: Path, n: int) -> list[Path]:
    """`n` inputs c00.wav, c01.wav, ... cycling through the bundled clips."""
    folder.mkdir()
    clips = sorted(WAVS.glob("*.wav"))
    made = []
    for i in range(n):
        made.append(folder / f"c{i:02d}.wav")
        shutil.copyfile(clips[i % len(clips)], made[-1])
    return made


def source_of(path: Path) -> str:
    """The bundled clip a copy was made from ('3' for c08.wav)."""
    return str(int(path.stem[1:]) % len(list(WAVS.glob("*.wav"))))


def run_and_kill_a_node(cluster: Cluster, args: list[str], watch: Path,
                        pattern: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """Start a run; once `watch` holds a file matching `pattern`, kill a worker node's
    raylet; return the finished run and how far it had got (files seen) at the kill."""
    process = subprocess.Popen([sys.executable, "-m", "streamasr", *args], cwd=REPO,
                               env=cluster.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + RUN_LIMIT_S
    seen = 0
    while time.monotonic() < deadline and process.poll() is None:
        found = list(watch.glob(pattern)) if watch.is_dir() else []
        if found:
            seen = len(found)
            cluster.live_worker().kill_raylet()
            break
        time.sleep(0.05)
    stdout, stderr = process.communicate(timeout=RUN_LIMIT_S)
    assert process.returncode is not None
    done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return done, seen


def test_file_on_three_nodes_writes_what_a_local_run_writes(
    cluster: Cluster, local_files: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = streamasr("file", *sorted(map(str, WAVS.glob("*.wav"))), "--model", MODEL,
                     "-o", str(out), "--format", FORMATS, "--ray", cluster.address,
                     env=cluster.env)
    assert done.returncode == 0, done.stderr
    assert "3 node(s), 3 CPU(s); 5 tasks" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in local_files.iterdir())
    for local in local_files.iterdir():
        ours = out / local.name
        if local.suffix == ".jsonl":  # the same events; only the clocks differ
            assert list(map(without_clocks, ours.read_text().splitlines())) == list(
                map(without_clocks, local.read_text().splitlines()))
        else:
            assert ours.read_bytes() == local.read_bytes(), local.name


def test_sentence_case_on_the_cluster_is_the_local_finishing_chain(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The `--ray -o --sentence-case` cell of tests/test_combinations.py: the tasks' files
    are those a local run writes (the same finishing chain), on this module's cluster."""
    clip = str(WAVS / "3.wav")
    local, ours = tmp_path / "local", tmp_path / "ray"
    done = streamasr("file", clip, "--model", MODEL, "-o", str(local), "--format", FORMATS,
                     "--sentence-case")
    assert done.returncode == 0, done.stderr
    done = streamasr("file", clip, "--model", MODEL, "-o", str(ours), "--format", FORMATS,
                     "--sentence-case", "--ray", cluster.address, env=cluster.env)
    assert done.returncode == 0, done.stderr
    assert "Turn" in (local / "3.txt").read_text()  # cased: the test can fail
    for name in ("3.txt", "3.srt", "3.vtt"):
        assert (ours / name).read_bytes() == (local / name).read_bytes(), name
    assert list(map(without_clocks, (ours / "3.jsonl").read_text().splitlines())) == list(
        map(without_clocks, (local / "3.jsonl").read_text().splitlines()))


def test_bench_on_three_nodes_scores_as_a_local_run(
    cluster: Cluster, local_bench: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "bench"
    done = streamasr("bench", str(WAVS), "--model", MODEL, "--out", str(out),
                     "--ray", cluster.address, env=cluster.env)
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / "results.json").read_text())
    ray = doc["run"]["ray"]
    assert (ray["nodes"], ray["cpus"]) == (3, 3.0)
    assert ray["ray_version"].count(".") == 2
    assert ray["settings"]["chunk 16"]["tasks"] >= 1
    ours, local = doc["settings"][0], local_bench["settings"][0]
    assert ours["summary"]["error_rate_pct"] == local["summary"]["error_rate_pct"]
    for key in ("ref_units", "substitutions", "deletions", "insertions", "utterances"):
        assert ours["summary"][key] == local["summary"][key]
    assert [(u["id"], u["hypothesis"], u["finals"], u["counts"], u["timing"]["first_token_ms"])
            for u in ours["utterances"]] == [
        (u["id"], u["hypothesis"], u["finals"], u["counts"], u["timing"]["first_token_ms"])
        for u in local["utterances"]]
    assert not (out / ".streamasr-ray").exists()


def test_a_node_whose_model_copy_differs_refuses_to_decode(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The model by name, from each node's own cache: the head's copy has one byte changed."""
    for node in cluster.nodes:
        copy = node.cache / "tiny-local"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(MODEL, copy, ignore=shutil.ignore_patterns("test_wavs", "*chunk-32*"))
    joiner = next((cluster.nodes[0].cache / "tiny-local").glob("joiner*chunk-16*"))
    data = bytearray(joiner.read_bytes())
    data[-1] ^= 0x01
    joiner.write_bytes(bytes(data))
    driver_cache = tmp_path / "driver-cache"
    shutil.copytree(cluster.nodes[1].cache / "tiny-local", driver_cache / "tiny-local")
    inputs = copies(tmp_path / "in", 9)
    out = tmp_path / "out"
    done = streamasr("file", *map(str, inputs), "--model", "tiny-local", "-o", str(out),
                     "--ray", cluster.address,
                     env={**cluster.env, "STREAMASR_HOME": str(driver_cache)})
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, done.stderr
    assert "fails verification" in lines[0] and joiner.name in lines[0]
    assert not (out / ".streamasr-ray").exists()  # only complete outputs are left


def test_file_run_survives_a_lost_node_with_one_output_per_input(
    cluster: Cluster, local_files: Path, tmp_path: Path
) -> None:
    inputs = copies(tmp_path / "in", 24)
    out = tmp_path / "out"
    done, seen = run_and_kill_a_node(
        cluster, ["file", *map(str, inputs), "--model", MODEL, "-o", str(out), "--ray",
                  cluster.address], out, "*.txt")
    assert done.returncode == 0, done.stderr
    assert 0 < seen < len(inputs), "the node was not killed mid-run"
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{p.stem}.txt" for p in inputs)
    for path in inputs:
        expected = (local_files / f"{source_of(path)}.txt").read_text()
        assert (out / f"{path.stem}.txt").read_text() == expected.replace(
            f"{source_of(path)}.wav", path.name)
    assert done.stderr.count(" -> ") == len(inputs)  # one summary line per input


def test_bench_run_survives_a_lost_node_counting_each_utterance_once(
    cluster: Cluster, local_bench: dict[str, Any], tmp_path: Path
) -> None:
    inputs = copies(tmp_path / "in", 24)
    texts = {u["id"]: u["reference"] for u in local_bench["settings"][0]["utterances"]}
    manifest = tmp_path / "set.jsonl"
    manifest.write_text("".join(
        json.dumps({"audio_filepath": str(p), "text": texts[source_of(p)]}) + "\n"
        for p in inputs))
    out = tmp_path / "bench"
    done, seen = run_and_kill_a_node(
        cluster, ["bench", str(manifest), "--model", MODEL, "--out", str(out), "--ray",
                  cluster.address], out / ".streamasr-ray" / "shards", "*.jsonl")
    assert done.returncode == 0, done.stderr
    assert seen > 0
    doc = json.loads((out / "results.json").read_text())
    setting = doc["settings"][0]
    ids = [u["id"] for u in setting["utterances"]]
    assert ids == [p.stem for p in inputs]  # each once, in dataset order
    local = {u["id"]: u for u in local_bench["settings"][0]["utterances"]}
    for row in setting["utterances"]:
        assert row["hypothesis"] == local[source_of(Path(row["audio"]))]["hypothesis"]
    summary = setting["summary"]
    assert summary["utterances"] == len(inputs)
    expected_ref = sum(local[source_of(p)]["counts"]["ref_units"] for p in inputs)
    expected_err = sum(local[source_of(p)]["counts"]["errors"] for p in inputs)
    assert summary["ref_units"] == expected_ref
    assert summary["error_rate_pct"] == round(100 * expected_err / expected_ref, 2)
    log_ids = [json.loads(line)["id"] for line in (out / "utterances.jsonl").open()]
    assert sorted(log_ids) == sorted(ids)
    assert doc["run"]["ray"]["settings"]["chunk 16"]["attempts"] >= len(
        {i // doc["run"]["ray"]["settings"]["chunk 16"]["shard_size"] for i in range(24)})


def test_ctrl_c_cancels_the_tasks_and_leaves_only_complete_outputs(
    cluster: Cluster, local_files: Path, tmp_path: Path
) -> None:
    inputs = copies(tmp_path / "in", 24)
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "streamasr", "file", *map(str, inputs), "--model", MODEL,
         "-o", str(out), "--format", "txt,srt", "--ray", cluster.address],
        cwd=REPO, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + RUN_LIMIT_S
    while not list(out.glob("*.srt")) and process.poll() is None:
        assert time.monotonic() < deadline, "no output appeared"
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=RUN_LIMIT_S)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    written = sorted(out.iterdir())
    assert 0 < len(written) < 2 * len(inputs), "the run was not stopped midway"
    for path in written:  # every file there is whole: as a local run writes it
        source = source_of(path)
        expected = (local_files / f"{source}{path.suffix}").read_text()
        assert path.read_text() == expected.replace(f"{source}.wav", f"{path.stem}.wav")


def release_archive(name: str, folder: Path) -> bytes:
    """A release-shaped tar.bz2 of a bundled model folder, unpacking to `name`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:bz2", compresslevel=1) as tar:
        tar.add(folder, arcname=name)
    return buffer.getvalue()


def test_nodes_without_a_released_model_pull_it_held_to_the_drivers_checksum(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A released name (one without a published checksum, so the driver's pull pins it): the
    worker nodes have not installed it; they pull it from where the driver did, refuse bytes
    other than the driver's, and decode with what they pulled."""
    entry = catalog.lookup("en-kroko")
    assert entry.archive_sha256 is None
    good = release_archive(entry.name, REPO / "models" / "tiny-random-transducer")
    other = release_archive(entry.name, REPO / "models" / "tiny-random-bpe")
    path = "/" + entry.url.rsplit("/", 1)[1]
    server = ArchiveServer()
    try:
        server.serve(path, good)
        env = {**cluster.env, "STREAMASR_HOME": str(tmp_path / "driver-cache"),
               "STREAMASR_MIRROR": server.url("/")}
        pulled = streamasr("models", "pull", "en-kroko", env=env)
        assert pulled.returncode == 0, pulled.stderr
        for node in cluster.nodes:
            shutil.rmtree(node.cache / entry.name, ignore_errors=True)
        inputs = copies(tmp_path / "in", 6)

        server.serve(path, other)  # the release host now serves other bytes
        refused = streamasr("file", *map(str, inputs), "--model", "en-kroko", "-o",
                            str(tmp_path / "refused"), "--ray", cluster.address, env=env)
        assert refused.returncode == 1, refused.stderr
        lines = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and "sha256" in lines[0], refused.stderr
        assert not any((n.cache / entry.name / "tokens.txt").exists() for n in cluster.nodes)

        server.serve(path, good)
        out = tmp_path / "out"
        done = streamasr("file", *map(str, inputs), "--model", "en-kroko", "-o", str(out),
                         "--format", "txt", "--ray", cluster.address, env=env)
        assert done.returncode == 0, done.stderr
        assert sorted(p.stem for p in out.iterdir()) == sorted(p.stem for p in inputs)
        have = [n for n in cluster.nodes if (n.cache / entry.name / "tokens.txt").is_file()]
        assert have, "no node pulled the model into its own cache"
        gets = [r for r in server.state.requests if r[0] == path]
        assert len(gets) >= 2  # the driver's pull and at least one node's
    finally:
        server.close()


def test_a_dying_agent_on_the_drivers_node_is_one_line_and_keeps_the_rows(
    cluster: Cluster, local_bench: dict[str, Any], tmp_path: Path
) -> None:
    """Last in this module: it ends the head node (Ray runs a driver on the head when several
    nodes share its host). The head's runtime-env agent is killed mid-run; its raylet dies
    with it, and Ray ends the driver at once. The command says so in one line, keeps every
    finished row in utterances.jsonl and leaves no state folder."""
    inputs = copies(tmp_path / "in", 24)
    texts = {u["id"]: u["reference"] for u in local_bench["settings"][0]["utterances"]}
    manifest = tmp_path / "set.jsonl"
    manifest.write_text("".join(
        json.dumps({"audio_filepath": str(p), "text": texts[source_of(p)]}) + "\n"
        for p in inputs))
    out = tmp_path / "bench"
    shards = out / ".streamasr-ray" / "shards"
    process = subprocess.Popen(
        [sys.executable, "-m", "streamasr", "bench", str(manifest), "--model", MODEL, "--out",
         str(out), "--ray", cluster.address],
        cwd=REPO, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + RUN_LIMIT_S
    finished: set[str] = set()
    while time.monotonic() < deadline and process.poll() is None:
        placed = list(shards.glob("*.jsonl")) if shards.is_dir() else []
        if placed:
            finished = {json.loads(line)["id"] for p in placed for line in p.open()}
            cluster.nodes[0].kill_agent("ray::RuntimeEnv")
            break
        time.sleep(0.05)
    stdout, stderr = process.communicate(timeout=RUN_LIMIT_S)
    assert finished, f"no shard was finished before the run ended: {stderr}"
    assert process.returncode == 1, stderr
    assert "Traceback" not in stderr + stdout
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "runtime-env agent" in lines[0] and "utterances.jsonl" in lines[0]
    rows = [json.loads(line) for line in (out / "utterances.jsonl").open()]
    assert finished <= {row["id"] for row in rows}  # every row finished before is kept
    local = {u["id"]: u for u in local_bench["settings"][0]["utterances"]}
    for row in rows:
        assert row["hypothesis"] == local[source_of(Path(row["audio"]))]["hypothesis"]
    assert not (out / ".streamasr-ray").exists()
