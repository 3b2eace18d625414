"""How `bench --ray` scales: x real time on 1, 2 and 3 Ray nodes against `bench --workers N`
on one host, the Ray overhead per task, the model load per worker, and a projection to 100
nodes from those measured figures.

All nodes run on this machine (each a `ray start` process with one CPU, as in
tests/test_ray_cluster.py), so three nodes share its cores with whatever else runs: the
figures are per-CPU efficiency and overhead, not a cluster's speed. The CPU model and the
load average before and after are recorded beside them.

    python scripts/ray_scale.py --utterances 40 --out build/ray-scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # this checkout; the tests' Ray cluster

from ray_fixture import Cluster, start_cluster  # noqa: E402

WAVS = REPO / "models" / "tiny-en" / "test_wavs"
MODEL = str(REPO / "models" / "tiny-en")


def make_set(folder: Path, n: int) -> Path:
    """`n` utterances cycling through the bundled clips, as a JSONL manifest."""
    texts = dict(line.split(" ", 1) for line in (WAVS / "trans.txt").read_text().splitlines())
    clips = sorted(WAVS.glob("*.wav"))
    rows = []
    for i in range(n):
        clip = clips[i % len(clips)]
        rows.append({"audio_filepath": str(clip), "text": texts[clip.stem].strip(),
                     "id": f"u{i:03d}"})
    manifest = folder / "set.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return manifest


def bench(manifest: Path, out: Path, *extra: str, env: dict[str, str] | None = None
          ) -> dict[str, Any]:
    """One `streamasr bench` run; its summary, wall time of the whole command included."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "streamasr", "bench", str(manifest), "--model", MODEL,
         "--out", str(out), *extra], cwd=REPO, env=env, capture_output=True, text=True)
    command_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"bench {' '.join(extra)} failed:\n{done.stderr[-3000:]}")
    doc = json.loads((out / "results.json").read_text())
    summary = doc["settings"][0]["summary"]
    return {
        "audio_s": summary["audio_s"], "compute_s": summary["compute_s"],
        "wall_s": summary["wall_s"], "throughput_x": summary["throughput_x"],
        "command_s": round(command_s, 2), "error_rate_pct": summary["error_rate_pct"],
        "ray": doc["run"].get("ray"),
    }


PROBE = r'''
import json, sys, time
import ray
from streamasr.cluster.models import model_spec, load_verified
from streamasr.backends.plan import make_plan

ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
model = sys.argv[2]
plan = make_plan(model, threads=1)
spec = model_spec(plan, plan.load())

@ray.remote(num_cpus=1)
def nothing(i):
    return i

@ray.remote(num_cpus=1, max_calls=1)  # a fresh worker process each: a cold load
def load(spec):
    started = time.perf_counter()
    load_verified(spec)
    return time.perf_counter() - started

ray.get([nothing.remote(i) for i in range(20)])  # worker processes up
n = 300
started = time.perf_counter()
ray.get([nothing.remote(i) for i in range(n)])
per_task = (time.perf_counter() - started) / n
started = time.perf_counter()
for i in range(30):
    ray.get(nothing.remote(i))
round_trip = (time.perf_counter() - started) / 30
loads = ray.get([load.remote(spec) for _ in range(6)])
print(json.dumps({"tasks_per_s": round(1 / per_task, 1), "per_task_ms": round(per_task * 1e3, 2),
                  "round_trip_ms": round(round_trip * 1e3, 2),
                  "model_load_s": sorted(round(x, 3) for x in loads)}))
'''


def probe(cluster: Cluster) -> dict[str, Any]:
    """Per-task overhead (no-op tasks) and the model load + check + warm-up per worker."""
    done = subprocess.run([sys.executable, "-c", PROBE, cluster.address, MODEL], cwd=REPO,
                          env=cluster.env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"probe failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def project(per_cpu_x: float, tasks_per_s: float, load_s: float, shard_audio_s: float,
            nodes: int, cpus_per_node: int, hours: float) -> dict[str, float]:
    """Wall time for `hours` of audio on `nodes` nodes, conservatively as a sum: one cold
    model load per worker (all in parallel), the audio spread over every CPU at the measured
    per-CPU speed, and every task dispatched one after the other at the measured rate of
    the one driver (in a real run dispatch overlaps decoding)."""
    cpus = nodes * cpus_per_node
    audio_s = hours * 3600
    tasks = audio_s / shard_audio_s
    decode_s = audio_s / (per_cpu_x * cpus)
    dispatch_s = tasks / tasks_per_s
    wall = load_s + decode_s + dispatch_s
    return {"nodes": nodes, "cpus": cpus, "hours": hours, "shard_audio_s": round(shard_audio_s, 1),
            "tasks": round(tasks), "load_s": round(load_s, 2), "decode_s": round(decode_s, 1),
            "dispatch_s": round(dispatch_s, 1), "wall_s": round(wall, 1),
            "x_real_time": round(audio_s / wall, 1),
            "overhead_pct": round(100 * (load_s + dispatch_s) / wall, 2)}


def projections(result: dict[str, Any], per_cpu_x: float, utterances: int
                ) -> list[dict[str, float]]:
    """1000 hours on 100 nodes of 16 CPUs: with this run's shards of the bundled clips, and
    with shards of 16 utterances of 10 s (a LibriSpeech-like test set)."""
    load_s = max(result["probe"]["model_load_s"])
    rate = result["probe"]["tasks_per_s"]
    largest = list(result["ray"].values())[-1]["ray"]["settings"]
    size = next(iter(largest.values()))["shard_size"]
    shard_audio_s = size * result["local"]["workers 1"]["audio_s"] / utterances
    return [
        project(per_cpu_x, rate, load_s, shard_audio_s, 100, 16, 1000),
        project(per_cpu_x, rate, load_s, 16 * 10.0, 100, 16, 1000),
    ]


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--utterances", type=int, default=40)
    parser.add_argument("--nodes", default="1,2,3")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "ray-scale.json")
    args = parser.parse_args()
    from streamasr.bench.report import cpu_model

    work = Path(tempfile.mkdtemp(prefix="ray-scale-"))
    result: dict[str, Any] = {"cpu": cpu_model(), "cores": os.cpu_count(),
                              "load_before": load_average(), "utterances": args.utterances}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    try:
        manifest = make_set(work, args.utterances)
        result["local"] = {f"workers {n}": bench(manifest, work / f"w{n}", "--workers", str(n))
                           for n in (1, 2)}
        result["ray"] = {}
        for nodes in map(int, args.nodes.split(",")):
            cluster = start_cluster(workers=nodes - 1)
            try:
                run = bench(manifest, work / f"r{nodes}", "--ray", cluster.address,
                            env=cluster.env)
                if nodes == max(map(int, args.nodes.split(","))):
                    result["probe"] = probe(cluster)
            finally:
                cluster.stop()
            result["ray"][f"{nodes} node(s)"] = run
            args.out.write_text(json.dumps(result, indent=1) + "\n")  # kept if a later step fails
        result["load_after"] = load_average()
        one = result["local"]["workers 1"]["throughput_x"]
        for name, row in [*result["local"].items(), *result["ray"].items()]:
            cpus = row["ray"]["cpus"] if row["ray"] else int(name.split()[1])
            row["per_cpu_vs_one_worker"] = round(row["throughput_x"] / cpus / one, 3)
        result["projection"] = projections(result, one, args.utterances)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
