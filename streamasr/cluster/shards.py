"""`bench --ray`: the one-stream pass of a setting as shards of utterances on the cluster.

Each task decodes a shard (a run of consecutive utterances) with `run_utterance`, exactly as
`bench` does locally, one engine per task, and writes the shard's rows (one JSON line per
utterance, with its position in the dataset) to `OUT/.streamasr-ray/shards/`, as a
temporary file renamed into place. A retried task finds its shard file in place and writes
nothing. The driver merges the rows by position and utterance id once each task ends, so a
shard written twice never counts twice and a missing one is an error, not a silent gap;
records, summary and results.json are then built as for a local run. Batched passes
(`--streams N`) run afterwards on the driver's own engine, as with `--workers`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamasr.bench.datasets import Utterance
from streamasr.bench.metrics import ErrorCounts, Stability, Timing
from streamasr.bench.outdir import RECORDS_NAME
from streamasr.bench.runner import RunOptions, UtteranceRecord
from streamasr.cluster import outputs
from streamasr.cluster.models import ModelSpec, load_verified, model_spec, node_name
from streamasr.errors import ClusterError

if TYPE_CHECKING:
    from streamasr.bench.sweep import Setting
    from streamasr.cluster.driver import RayDriver

log = logging.getLogger("streamasr")

#: Most utterances in one task: small enough that a lost node costs little work again.
SHARD_MAX = 16
#: Shards per CPU of the cluster, at least, so that faster nodes take more of them.
SHARDS_PER_CPU = 4


@dataclass(frozen=True)
class ShardJob:
    """A run of utterances (with their positions in the dataset) and its shard file."""

    key: str
    items: tuple[tuple[int, Utterance], ...]
    options: RunOptions
    path: str
    state: str


@dataclass(frozen=True)
class ShardNote:
    """What a shard task tells the driver: where its rows are, never the rows."""

    key: str
    path: str
    rows: int
    skipped: bool = False
    node: str = ""


def decode_shard(spec: ModelSpec, job: ShardJob) -> ShardNote:
    """The task: decode each utterance of the shard, then place its rows file in one rename."""
    from streamasr.bench.runner import failed_record, run_utterance

    state = Path(job.state)
    outputs.note_attempt(state, job.key)
    final = Path(job.path)
    if final.exists():
        return ShardNote(job.key, job.path, len(job.items), skipped=True, node=node_name())
    recognizer = load_verified(spec)
    temp = outputs.temp_folder(state, job.key) / final.name
    with temp.open("w", encoding="utf-8") as handle:
        for index, utt in job.items:
            try:
                record = run_utterance(recognizer, utt, job.options)
            except Exception as exc:  # one utterance that breaks the engine is one failed row
                record = failed_record(utt, f"the engine failed on it: {exc}",
                                       job.options.metric)
            handle.write(json.dumps({"index": index, **record.to_dict()}) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    outputs.place(temp, final)
    temp.parent.rmdir()
    return ShardNote(job.key, job.path, len(job.items), node=node_name())


def shard_size(utterances: int, cpus: float) -> int:
    """Utterances per task: at least SHARDS_PER_CPU shards per CPU, at most SHARD_MAX each."""
    per = utterances // max(1, int(cpus) * SHARDS_PER_CPU)
    return max(1, min(SHARD_MAX, per))


def shard_jobs(utterances: Sequence[Utterance], options: RunOptions, folder: Path,
               state: Path, size: int) -> list[ShardJob]:
    """Consecutive runs of `size` utterances, each with its shard file in `folder`."""
    jobs = []
    for start in range(0, len(utterances), size):
        key = f"shard-{start // size:06d}"
        items = tuple((i, utterances[i]) for i in range(start, min(start + size, len(utterances))))
        jobs.append(ShardJob(key, items, options, str(folder / f"{key}.jsonl"), str(state)))
    return jobs


def record_from_row(row: dict[str, Any]) -> UtteranceRecord:
    """An UtteranceRecord back from its JSON row (`UtteranceRecord.to_dict`)."""
    counts = row["counts"]
    stab = row["stability"]
    return UtteranceRecord(
        id=row["id"], audio=row["audio"], reference=row["reference"],
        hypothesis=row["hypothesis"], audio_s=row["audio_s"], compute_s=row["compute_s"],
        rtf=row["rtf"],
        counts=ErrorCounts(counts["ref_units"], counts["substitutions"], counts["deletions"],
                           counts["insertions"]),
        timing=Timing(**row["timing"]),
        stability=Stability(stab["revisions"], tuple(stab["revised_words"])),
        speech_onset_s=row["speech_onset_s"], speech_end_s=row["speech_end_s"],
        span_source=row["span_source"], finals=tuple(row["finals"]), error=row["error"],
    )


def read_rows(path: Path, job: ShardJob) -> dict[int, UtteranceRecord]:
    """A shard file's records by dataset position; each must be the utterance it names."""
    wanted = {index: utt.id for index, utt in job.items}
    found: dict[int, UtteranceRecord] = {}
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            index = row.pop("index")
            if wanted.get(index) != row["id"]:
                raise ClusterError(f"{path}: row {index} ({row['id']}) is not in this shard")
            found[index] = record_from_row(row)
    if set(found) != set(wanted):
        raise ClusterError(f"{path}: {len(wanted) - len(found)} utterance(s) missing")
    return found


def run_setting_on_ray(
    setting: Setting,
    engine: Any,
    utterances: Sequence[Utterance],
    options: RunOptions,
    streams: Sequence[int] = (1,),
    on_done: Callable[[str, UtteranceRecord], None] = lambda name, record: None,
    *,
    out: Path,
    driver: RayDriver,
    ray_record: dict[str, Any],
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """`sweep.run_setting` with the one-stream pass in shards on the cluster.

    `ray_record` is the cluster part of the run record: this setting's tasks, attempts and
    retries are added to it.
    """
    from streamasr.bench.report import setting_record, summarize
    from streamasr.bench.runner import warm_up
    from streamasr.bench.sweep import batched_passes
    from streamasr.cluster.driver import DriverLost

    spec = model_spec(setting.plan, setting.recognizer)
    state = outputs.fresh_state(out)
    folder = state / "shards"
    folder.mkdir()
    size = shard_size(len(utterances), driver.info.cpus)
    jobs = {job.key: job for job in shard_jobs(utterances, options, folder, state, size)}
    records: dict[int, UtteranceRecord] = {}

    def on_note(note: ShardNote) -> None:
        for index, record in sorted(read_rows(Path(note.path), jobs[note.key]).items()):
            if index not in records:  # a shard read twice still counts once
                records[index] = record
                on_done(setting.name, record)

    started = clock()
    try:
        driver.run(decode_shard, list(jobs.values()), spec, spec.cpus, on_note,
                   [f"{job.key} ({job.items[0][1].id}...)" for job in jobs.values()])
    except DriverLost as exc:  # shards placed before the driver died are logged all the same
        for job in jobs.values():
            if Path(job.path).is_file() and any(i not in records for i, _ in job.items):
                with contextlib.suppress(ClusterError, OSError, ValueError, KeyError):
                    on_note(ShardNote(job.key, job.path, len(job.items)))
        raise DriverLost(f"{exc}; the {len(records)} utterance(s) finished are in "
                         f"{out / RECORDS_NAME}") from None
    finally:
        counts = outputs.attempts(state)
        outputs.remove_state(out)
    wall_s = clock() - started
    ordered = [records[i] for i in range(len(utterances))]
    ray_record.setdefault("settings", {})[setting.name] = {
        "tasks": len(jobs),
        "shard_size": size,
        "attempts": sum(counts.values()),
        "retried_tasks": sum(1 for n in counts.values() if n > 1),
    }
    recognizer = setting.recognizer
    if any(n > 1 for n in streams):
        warm_up(recognizer)
    sweep = batched_passes(setting, ordered, utterances, options, streams, on_done, clock)
    summary = summarize(ordered, options.metric, wall_s, sweep or None)
    return setting_record(setting.name, recognizer.info, summary, ordered)


def ray_runner(address: str, out: Path) -> tuple[Callable[..., dict[str, Any]], dict[str, Any]]:
    """Join the cluster; `run_setting` for bench on it, and the run record's `ray` entry
    (nodes, CPUs, Ray version; tasks and retries are added per setting as they run)."""
    import atexit
    from functools import partial

    from streamasr.cluster.driver import start_driver

    driver = start_driver(address)
    atexit.register(driver.close)  # leave the cluster when the command ends, however
    record = driver.info.to_record()
    runner = partial(run_setting_on_ray, out=out, driver=driver, ray_record=record)
    return runner, record
