"""`--plot PATH.png`: the error-rate-versus-latency picture of a sweep (needs matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streamasr.errors import DependencyError


def plot_tradeoff(doc: dict[str, Any], path: Path) -> None:
    """One point per setting at its first-token p50, a bar to its p90; error rate upwards."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DependencyError(
            "--plot needs matplotlib: pip install 'streamasr[plot]' (or pip install matplotlib)"
        ) from None
    metric = doc["run"].get("metric", "wer").upper()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for setting in doc["settings"]:
        s = setting["summary"]
        first = s.get("first_token_ms") or {}
        rate = s.get("error_rate_pct")
        if "p50" not in first or rate is None:
            continue
        ax.errorbar(
            [first["p50"]], [rate], xerr=[[0], [first["p90"] - first["p50"]]], fmt="o", capsize=3
        )
        ax.annotate(
            setting["name"], (first["p50"], rate), textcoords="offset points", xytext=(5, 5)
        )
    ax.set_xlabel("first-token latency, ms of audio (p50, bar to p90)")
    ax.set_ylabel(f"{metric} %")
    ax.set_title(Path(str(doc["dataset"]["path"])).name or "bench")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
