"""`streamasr bench`'s passes: every setting under one progress bar with an ETA (on a terminal
only), and the record of where a stopped run ended."""

from __future__ import annotations

from typing import Any

from streamasr.commands.common import err_console
from streamasr.output.render import escape


def stopped_record(results: list[dict[str, Any]], planned: int) -> dict[str, Any]:
    """Why and where an incomplete results.json ends."""
    from streamasr.session.interrupts import signal_name, stopped_by

    signum = stopped_by()
    return {
        "signal": signal_name(signum) if signum is not None else "KeyboardInterrupt",
        "utterances_done": sum(len(s["utterances"]) for s in results),
        "utterances_planned": planned,
    }


def run_all(
    settings: list[Any],
    engine: Any,
    utterances: Any,
    options: Any,
    streams: list[int],
    run_setting: Any,
    keep: Any = lambda record: None,
) -> tuple[list[dict[str, Any]], bool]:
    """Run each setting under one progress bar with an ETA (shown on a terminal only).

    `keep` gets every finished utterance's record at once (the `utterances.jsonl` log).
    Stopped (Ctrl-C, SIGTERM), it returns what finished and False: the settings done, and
    the one-stream records of the setting that was running (a partial batched pass is
    left out: it compares with nothing).
    """
    import time

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from streamasr.bench.report import setting_record, summarize

    passes = 1 + sum(1 for n in streams if n > 1)
    total = len(utterances) * len(settings) * passes
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    results: list[dict[str, Any]] = []
    with Progress(
        *columns, console=err_console, transient=True, disable=not err_console.is_terminal
    ) as progress:
        task = progress.add_task("bench", total=total)

        running: list[Any] = []  # the one-stream records of the setting now running

        def on_done(name: str, record: Any) -> None:
            keep({"setting": name, **record.to_dict()})
            if name == settings[len(results)].name:
                running.append(record)
            progress.update(task, advance=1, description=f"{name}: {escape(record.id)}")

        for setting in settings:
            running.clear()
            started = time.perf_counter()
            try:
                results.append(run_setting(setting, engine, utterances, options, streams, on_done))
            except KeyboardInterrupt:
                if running:
                    order = {u.id: i for i, u in enumerate(utterances)}
                    done = sorted(running, key=lambda r: order.get(r.id, 0))
                    summary = summarize(done, options.metric, time.perf_counter() - started)
                    summary["complete"] = False
                    info = setting.recognizer.info
                    results.append(setting_record(setting.name, info, summary, done))
                return results, False
    return results, True
