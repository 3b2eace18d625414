"""`--plot PATH.png`: the error-rate-versus-latency picture of a sweep (needs matplotlib).

The picture must not mislead at a glance: the title names the model and the dataset, the
error-rate axis starts at zero (a 0.5-point gap looks like one), and each point says which
chunk setting it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streamasr.errors import DependencyError
from streamasr.extras import install_hint


def require_matplotlib() -> None:
    """Fail before any decoding when `--plot` cannot be drawn."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise DependencyError(f"--plot needs matplotlib: {install_hint('plot')}") from None


def dataset_label(path: str) -> str:
    """A short dataset name: the folder, or folder/file for a manifest or a Kaldi file."""
    p = Path(path)
    if p.suffix in (".jsonl", ".json") or p.name in ("wav.scp", "text"):
        return f"{p.parent.name}/{p.name}" if p.parent.name else p.name
    return p.name or str(p)


def tradeoff_figure(doc: dict[str, Any]) -> Any:
    """The matplotlib Figure: one point per setting at its first-token p50, a bar to p90."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = doc["run"].get("metric", "wer").upper()
    models = sorted({str(s.get("model", "")) for s in doc["settings"]} - {""})
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    top = right = 0.0
    for setting in doc["settings"]:
        s = setting["summary"]
        first = s.get("first_token_ms") or {}
        rate = s.get("error_rate_pct")
        if "p50" not in first or rate is None:
            continue
        top, right = max(top, rate), max(right, first["p90"])
        ax.errorbar(
            [first["p50"]], [rate], xerr=[[0], [first["p90"] - first["p50"]]], fmt="o", capsize=3
        )
        label = setting["name"]
        if "chunk_ms" in setting:
            label += f" ({setting['chunk_ms']} ms)"
        ax.annotate(label, (first["p50"], rate), textcoords="offset points", xytext=(5, 5))
    ax.set_xlabel("first-token latency, ms of audio (p50, bar to p90)")
    ax.set_ylabel(f"{metric} %")
    title = f"{', '.join(models) or 'model'} on {dataset_label(str(doc['dataset']['path']))}"
    ax.set_title(title)
    ax.set_ylim(0, max(1.0, top * 1.15))
    ax.set_xlim(0, max(100.0, right * 1.3))  # room for the labels right of the points
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def plot_tradeoff(doc: dict[str, Any], path: Path) -> None:
    """Draw the sweep to a PNG at `path`."""
    fig = tradeoff_figure(doc)
    import matplotlib.pyplot as plt

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    except OSError as exc:
        from streamasr.bench.outdir import ResultsFolderError

        raise ResultsFolderError(
            f"--plot {path}: cannot write it ({exc.strerror or exc}); give --plot a writable "
            "path (results.json and results.md are written)"
        ) from None
    finally:
        plt.close(fig)
