"""The level meter and the progress bar, drawn with Rich on stderr (numbers from level.py
and progress.py). Apart from the renderers so that render.py stays about events."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from rich.console import Console, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from streamasr.audio.level import LevelReading
from streamasr.output.progress import ProgressReading, ProgressTracker
from streamasr.session.events import Event, Final, Partial
from streamasr.text.printable import printable

METER_FLOOR_DBFS = -60.0
METER_CELLS = 30
PROGRESS_BAR_CELLS = 24


def _db(value: float) -> str:
    return "-inf" if value == -math.inf else f"{value:5.1f}"


def meter_text(reading: LevelReading) -> Text:
    """One line: a bar from -60 to 0 dBFS, the block's level, the held peak, and warnings."""

    def cells(value: float) -> int:
        if value == -math.inf:
            return 0
        share = (value - METER_FLOOR_DBFS) / -METER_FLOOR_DBFS
        return max(0, min(METER_CELLS, round(share * METER_CELLS)))

    filled = cells(reading.level_dbfs)
    hold = cells(reading.peak_hold_dbfs)
    color = "red" if reading.clipping else "yellow" if reading.level_dbfs > -6 else "green"
    bar = Text("input ", no_wrap=True, overflow="ellipsis")  # one line, even when narrow
    bar.append("█" * filled, style=color)
    for cell in range(filled, METER_CELLS):
        bar.append("│" if cell == hold - 1 and hold > filled else "·", style="dim")
    bar.append(
        f" {_db(reading.level_dbfs)} dBFS, peak {_db(reading.peak_hold_dbfs)}", style="dim"
    )
    if reading.clipping:
        bar.append("  CLIPPING: lower the input gain", style="bold red")
    if reading.no_signal:
        bar.append(
            f"  no signal for {reading.silent_for_s:.0f} s: muted or wrong device?",
            style="bold yellow",
        )
    return bar


def _clock_text(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def progress_table(source: str, reading: ProgressReading, width: int) -> Table:
    """One line of `width` cells: name, bar, position / duration, x real time, ETA, partial.

    The figures always show; on a narrow line the bar, then the name, give way first. The
    partial gets what is left, cut with an ellipsis, and is left out when under 8 cells.
    """
    source = printable(source)
    if reading.duration_s is None:
        where = f"{reading.position_s:.1f} s"
    else:
        where = f"{reading.position_s:.1f}/{reading.duration_s:.1f} s"
    figures = [where]
    if reading.speed_x is not None:
        figures.append(f"{reading.speed_x:.1f}x real time")
    if reading.eta_s is not None:
        figures.append(f"ETA {_clock_text(reading.eta_s)}")
    figures_text = ", ".join(figures)
    room = width - len(figures_text) - 3  # three one-cell gaps between four columns
    name_cells = min(len(source), 24)
    bar_cells = PROGRESS_BAR_CELLS
    if name_cells + bar_cells > room:
        bar_cells = max(6, room - name_cells)
        name_cells = max(1, min(name_cells, room - bar_cells))
    if reading.duration_s is None:
        bar = ProgressBar(total=None, width=bar_cells, animation_time=reading.elapsed_s)
    else:
        total = max(reading.duration_s, 1e-9)
        bar = ProgressBar(total=total, completed=reading.position_s, width=bar_cells)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=name_cells, no_wrap=True, overflow="ellipsis")
    grid.add_column(width=bar_cells)
    grid.add_column(width=len(figures_text), no_wrap=True)
    row: list[RenderableType] = [Text(source, style="bold"), bar, Text(figures_text)]
    left = room - name_cells - bar_cells
    if left >= 8 and reading.partial:
        grid.add_column(width=left, no_wrap=True, overflow="ellipsis")
        row.append(Text(printable(reading.partial), style="yellow"))
    grid.add_row(*row)
    return grid


class ProgressDisplay:
    """A progress bar on stderr while data goes to a file or pipe (stderr a terminal).

    Redrawn at most every `refresh_s` (four times a second), so decoding is not slowed;
    removed when the input ends, so only the summary line stays.
    """

    def __init__(self, err: Console, clock: Callable[[], float] = time.monotonic) -> None:
        self.err = err
        self.clock = clock
        self._live: Live | None = None
        self._source = ""
        self._tracker = ProgressTracker(None, clock)

    def begin(self, source: str, duration_s: float | None) -> None:
        """Start the bar for one input; `duration_s` None: the length is unknown."""
        self._source = source
        self._tracker = ProgressTracker(duration_s, self.clock)
        self._live = Live(
            progress_table(source, self._tracker.reading(), self.err.width),
            console=self.err,
            transient=True,
            auto_refresh=False,
            redirect_stdout=False,
        )
        self._live.start(refresh=True)

    def advance(self, position_s: float) -> None:
        """Audio fed so far; redraws when due."""
        self._tracker.advance(position_s)
        if self._live is not None and self._tracker.due():
            shown = progress_table(self._source, self._tracker.reading(), self.err.width)
            self._live.update(shown, refresh=True)

    def event(self, event: Event) -> None:
        """Keep the latest partial to show beside the bar."""
        if isinstance(event, Partial):
            self._tracker.partial(event.text)
        elif isinstance(event, Final):
            self._tracker.partial("")

    def end(self) -> None:
        """Remove the bar."""
        if self._live is not None:
            self._live.stop()
            self._live = None
