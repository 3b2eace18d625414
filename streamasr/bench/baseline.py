"""The baseline gate: `bench --baseline results.json --fail-on RULES` compares this run's
summaries with an earlier run's and fails when a metric moved too far.

`--fail-on "wer+0.5,first_token_p90+50ms"` rules: METRIC, then + (fail when the value rose by
more than the amount) or - (fail when it fell by more), then the amount: a bare number is in
the metric's own unit (percentage points for wer/cer, ms for latencies, x real time for
throughput), `ms` or `s` for latencies, `%` relative to the baseline value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamasr.bench.report import SCHEMA, streams_entries
from streamasr.errors import InputError, UsageError
from streamasr.whole_file import read_whole

_METRIC_PATHS: dict[str, tuple[str, ...]] = {
    "error_rate": ("error_rate_pct",),
    "wer": ("error_rate_pct",),
    "cer": ("error_rate_pct",),
    "mer": ("error_rate_pct",),
    "rtf": ("rtf",),
    "throughput": ("throughput_x",),
    "streams_throughput": ("streams", "throughput_x"),  # the largest --streams value
    "revisions": ("revisions_per_utt",),
}
for _name in ("first_token", "first_token_wall", "final", "final_wall", "complete"):
    for _p in ("p50", "p90", "p99"):
        _METRIC_PATHS[f"{_name}_{_p}"] = (f"{_name}_ms", _p)
_LATENCY = {name for name, path in _METRIC_PATHS.items() if path[0].endswith("_ms")}
_RULE = re.compile(r"^\s*([a-z0-9_]+)\s*([+-])\s*([0-9]*\.?[0-9]+)\s*(ms|s|%|pp)?\s*$")


@dataclass(frozen=True)
class Rule:
    """One --fail-on term: fail when METRIC moved in `direction` by more than the amount."""

    metric: str
    direction: str  # "+" or "-"
    amount: float  # in the metric's unit, or percent of the baseline when relative
    relative: bool = False

    def __str__(self) -> str:
        unit = "%" if self.relative else ("ms" if self.metric in _LATENCY else "")
        return f"{self.metric}{self.direction}{self.amount:g}{unit}"


def parse_fail_on(text: str) -> list[Rule]:
    """Parse 'wer+0.5,first_token_p90+50ms,throughput-10%'."""
    rules = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        match = _RULE.match(term)
        if not match:
            raise UsageError(
                f"--fail-on term {term!r} is not METRIC+AMOUNT or METRIC-AMOUNT "
                "(e.g. wer+0.5, first_token_p90+50ms, throughput-10%)"
            )
        metric, direction, number, unit = match.groups()
        if metric not in _METRIC_PATHS:
            raise UsageError(
                f"--fail-on metric {metric!r} is not known; use one of: "
                f"{', '.join(sorted(_METRIC_PATHS))}"
            )
        amount = float(number)
        if unit in ("ms", "s") and metric not in _LATENCY:
            raise UsageError(f"--fail-on {term!r}: {metric} is not a latency; drop the {unit}")
        if unit == "pp" and metric not in ("wer", "cer", "mer", "error_rate"):
            raise UsageError(f"--fail-on {term!r}: pp (percentage points) is for wer/cer only")
        if unit == "s":
            amount *= 1000.0
        rules.append(Rule(metric, direction, amount, relative=unit == "%"))
    if not rules:
        raise UsageError("--fail-on is empty; give terms like wer+0.5,first_token_p90+50ms")
    return rules


def metric_value(summary: dict[str, Any], metric: str) -> float | None:
    """A summary figure by its --fail-on name (None when not measured)."""
    value: Any = summary
    if metric == "streams_throughput":
        entries = streams_entries(summary)
        value = {"streams": entries[-1] if entries else None}
    for key in _METRIC_PATHS[metric]:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return float(value) if isinstance(value, (int, float)) else None


@dataclass(frozen=True)
class Check:
    """One metric of one setting against the baseline."""

    setting: str
    metric: str
    baseline: float | None
    current: float | None
    rule: Rule | None = None

    @property
    def delta(self) -> float | None:
        """current - baseline."""
        if self.baseline is None or self.current is None:
            return None
        return self.current - self.baseline

    @property
    def failed(self) -> bool:
        """True when a rule exists and the change is beyond it."""
        if self.rule is None or self.delta is None:
            return False
        allowed = self.rule.amount
        if self.rule.relative:
            allowed = abs(self.baseline or 0.0) * self.rule.amount / 100.0
        if self.rule.direction == "+":
            return self.delta > allowed + 1e-9
        return -self.delta > allowed + 1e-9


#: a results.json holds summaries per setting, not per utterance: kilobytes
MAX_BASELINE_BYTES = 64 << 20


def load_baseline(path: Path) -> dict[str, Any]:
    """An earlier results.json (a directory holding one is accepted too)."""
    if path.is_dir():
        path = path / "results.json"
    if not path.exists():
        raise InputError(f"--baseline {path}: no such file; pass an earlier results.json")
    data = read_whole(path, "--baseline", MAX_BASELINE_BYTES, "pass an earlier results.json",
                      InputError)  # fmt: skip
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"--baseline {path}: not a readable results.json ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise InputError(
            f"--baseline {path}: not a streamasr bench results.json (schema {SCHEMA} expected)"
        )
    return doc


DEFAULT_COMPARED = ("error_rate", "first_token_p50", "first_token_p90", "final_p50", "rtf")


def check_baseline_matches(baseline: dict[str, Any], settings: Sequence[str], path: str) -> None:
    """--fail-on compares settings by name: with none in common, every check would be vacuous
    and the gate would pass whatever the run gives. Refuse that before anything runs."""
    names = [s.get("name") for s in baseline.get("settings", []) if isinstance(s, dict)]
    if not set(names) & set(settings):
        raise UsageError(
            f"--fail-on: --baseline {path} has no setting of this run to compare "
            f"(it has {', '.join(map(str, names)) or 'none'}; this run has "
            f"{', '.join(settings)}); run the baseline's settings or make a new baseline"
        )


def compare(
    baseline: dict[str, Any], current: dict[str, Any], rules: Sequence[Rule] = ()
) -> list[Check]:
    """Settings matched by name; every ruled metric, plus the headline ones for display."""
    before = {s["name"]: s["summary"] for s in baseline.get("settings", [])}
    checks = []
    ruled = {r.metric: r for r in rules}
    names = list(ruled) + [m for m in DEFAULT_COMPARED if m not in ruled]
    for setting in current["settings"]:
        old = before.get(setting["name"])
        for metric in names:
            base = metric_value(old, metric) if old is not None else None
            checks.append(
                Check(
                    setting["name"],
                    metric,
                    base,
                    metric_value(setting["summary"], metric),
                    ruled.get(metric),
                )
            )
    return checks


def comparison_lines(checks: Sequence[Check]) -> list[str]:
    """Human lines: setting, metric, baseline -> current (delta), verdict."""
    lines = []
    for check in checks:
        if check.delta is None:
            verdict = "not comparable (missing in the baseline or here)"
            lines.append(f"- {check.setting} {check.metric}: {verdict}")
            continue
        verdict = "FAIL" if check.failed else ("ok" if check.rule else "")
        rule = f" [rule {check.rule}]" if check.rule else ""
        lines.append(
            f"- {check.setting} {check.metric}: {check.baseline:g} -> {check.current:g} "
            f"({check.delta:+.3g}){rule} {verdict}".rstrip()
        )
    return lines
