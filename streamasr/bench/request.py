"""What `streamasr bench` was asked to do, checked before anything loads: bench's own options
and the little of the model group a run needs, without the command line's types."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamasr.backends.options import check_number
from streamasr.bench.metrics import METRICS
from streamasr.bench.sweep import parse_int_list, swept_option
from streamasr.bench.workers import check_workers
from streamasr.errors import UsageError
from streamasr.session.batch import SCHEDULES

MAX_STREAMS = 256  # one batch of utterances in memory at once; far past any CPU's cores
#: --probe-seconds bounds: shorter gives too few blocks for a p99; longer is a soak test.
PROBE_MIN_S = 1.0
PROBE_MAX_S = 600.0


@dataclass(frozen=True)
class BenchRequest:
    """Bench's options, with the model named, the engine options as given (one may be a
    sweep) and --vad-gate: what the checks and the run record need of the model group."""

    dataset: Path
    model: str | None = None
    engine: Mapping[str, object] = field(default_factory=dict)
    vad_gate: bool = False
    limit: int | None = None
    audio_column: str | None = None  # TSV/CSV datasets; None = found by name
    text_column: str | None = None
    metric: str = "auto"
    realtime: bool = False
    streams: str | int | None = None  # None: 1, or auto with --capacity
    workers: int = 1
    ray: str | None = None  # a Ray cluster's address ("local": one started here)
    capacity: bool = False
    probe_seconds: float = 15.0
    schedule: str | None = None  # --capacity's pacing (batch.SCHEDULES); None: ready
    ceiling: str | None = None  # --capacity: a stream count, or capacity_cpu.py's JSON
    out: Path = Path("bench-results")
    baseline: Path | None = None
    fail_on: str | None = None
    plot: Path | None = None

    def check(self) -> None:
        """Refuse impossible combinations before anything is loaded."""
        swept = swept_option(self.engine)
        if self.capacity:
            if swept and any(sep in str(self.engine[swept]) for sep in ",/"):
                raise UsageError("--capacity measures one setting; give one value of the "
                                 "swept option")
            self._check_capacity()
        elif str(self.streams).strip() == "auto":
            raise UsageError("--streams auto searches the live streams a machine holds: "
                             "add --capacity, or give counts (1,2,4,8)")
        else:
            for flag, value in (("--schedule", self.schedule), ("--ceiling", self.ceiling)):
                if value is not None:
                    raise UsageError(f"{flag} applies to live streams paced by --capacity "
                                     "(--streams alone decodes unpaced batches); add --capacity "
                                     f"or drop {flag}")
        for n in self.capacity_counts() or self.stream_counts():
            check_number("--streams", n, 1, MAX_STREAMS, "(streams decoded in one batch)")
        if self.limit is not None and self.limit < 1:
            raise UsageError(f"--limit must be at least 1, got {self.limit}")
        check_workers(self.workers)
        if self.ray is not None and self.workers > 1:
            raise UsageError("--ray spreads the utterances over the cluster's CPUs; drop "
                             "--workers")
        if self.vad_gate and max(self.stream_counts()) > 1:
            raise UsageError("--vad-gate ends and reopens a stream at each gap, which a batched "
                             "step cannot; use it without --streams")
        if self.realtime and max(self.stream_counts()) > 1:
            raise UsageError("--realtime paces one live stream at a time; use it without --streams")
        if self.metric not in (*METRICS, "auto"):
            raise UsageError(f"--metric {self.metric!r}: use wer, cer, mer or auto")
        if self.fail_on and self.baseline is None:
            raise UsageError("--fail-on needs --baseline PREVIOUS/results.json to compare against")

    def _check_capacity(self) -> None:
        """Refuse what a capacity run cannot honour."""
        if self.realtime:
            raise UsageError("--capacity paces every stream at real time itself; drop --realtime")
        if self.ray is not None:
            raise UsageError("--capacity measures this machine; drop --ray")
        if self.vad_gate:
            raise UsageError("--capacity runs batched steps, which --vad-gate cannot; drop it")
        for flag, value in (("--baseline", self.baseline), ("--fail-on", self.fail_on),
                            ("--plot", self.plot)):
            if value is not None:
                raise UsageError(f"--capacity writes its own report; drop {flag}")
        if self.schedule is not None and self.schedule not in SCHEDULES:
            raise UsageError(f"--schedule {self.schedule!r}: use {' or '.join(SCHEDULES)}")
        if self.ceiling is not None:
            read_ceiling(self.ceiling)
        if not PROBE_MIN_S <= self.probe_seconds <= PROBE_MAX_S:
            raise UsageError(
                f"--probe-seconds must be between {PROBE_MIN_S:g} and {PROBE_MAX_S:g}, "
                f"got {self.probe_seconds:g}"
            )

    def stream_counts(self) -> list[int]:
        """--streams as a sorted list: '1,4,2' -> [1, 2, 4]."""
        if self.capacity or self.streams is None:
            return [1]
        values = parse_int_list(str(self.streams), "--streams")
        return sorted(v for v in values if v is not None) or [1]

    def capacity_counts(self) -> list[int] | None:
        """--capacity's stream counts to probe; None: search (auto)."""
        if not self.capacity or self.streams is None or str(self.streams).strip() == "auto":
            return None
        values = parse_int_list(str(self.streams), "--streams")
        return sorted(v for v in values if v is not None) or None


def read_ceiling(value: str) -> float:
    """--ceiling: a stream count, or the `ceiling_streams` of scripts/capacity_cpu.py's JSON."""
    found: Any
    try:
        found = float(value)
    except ValueError:
        found = _ceiling_in_file(value)
    if (isinstance(found, bool) or not isinstance(found, (int, float))
            or not math.isfinite(found) or found <= 0):
        raise UsageError(f"--ceiling {value}: give a positive number of streams, or the JSON "
                         "that scripts/capacity_cpu.py --out writes")
    return float(found)


def _ceiling_in_file(value: str) -> Any:
    try:
        doc = json.loads(Path(value).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--ceiling {value}: neither a number nor a readable JSON file of "
                         f"scripts/capacity_cpu.py --out ({exc})") from None
    return doc.get("ceiling_streams") if isinstance(doc, dict) else None
