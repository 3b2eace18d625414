"""Progress of a long decode: how far, how fast, how long still. Values only; render.py draws.

A decode that writes to a file or pipe is otherwise silent until it ends; these figures are
what the progress bar on stderr shows. The clock is injected so tests control time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_REFRESH_S = 0.25  # redraw at most four times a second: drawing must not slow decoding


@dataclass(frozen=True)
class ProgressReading:
    """Where a decode stands. `duration_s` is None when the length is unknown (stdin)."""

    position_s: float
    duration_s: float | None
    elapsed_s: float
    speed_x: float | None  # audio seconds per wall second; None before any audio was fed
    eta_s: float | None  # None when the length or the speed is unknown
    partial: str

    @property
    def fraction(self) -> float | None:
        """Share of the audio done, 0..1; None when the length is unknown."""
        if self.duration_s is None:
            return None
        if self.duration_s <= 0:
            return 1.0
        return min(1.0, self.position_s / self.duration_s)


class ProgressTracker:
    """Turns audio positions into readings, and says when a redraw is due."""

    def __init__(
        self,
        duration_s: float | None,
        clock: Callable[[], float] = time.monotonic,
        refresh_s: float = DEFAULT_REFRESH_S,
    ) -> None:
        self.duration_s = duration_s
        self.clock = clock
        self.refresh_s = refresh_s
        self._start = clock()
        self._last_draw: float | None = None
        self._position_s = 0.0
        self._partial = ""

    def advance(self, position_s: float) -> None:
        """Audio fed so far, in seconds."""
        self._position_s = position_s

    def partial(self, text: str) -> None:
        """The hypothesis shown now ('' after a final)."""
        self._partial = text

    def due(self) -> bool:
        """True when the last redraw is at least `refresh_s` old (and marks a redraw)."""
        now = self.clock()
        if self._last_draw is not None and now - self._last_draw < self.refresh_s:
            return False
        self._last_draw = now
        return True

    def reading(self) -> ProgressReading:
        """The figures for a redraw now."""
        elapsed = self.clock() - self._start
        speed = self._position_s / elapsed if elapsed > 0 and self._position_s > 0 else None
        eta = None
        if self.duration_s is not None and speed:
            eta = max(0.0, self.duration_s - self._position_s) / speed
        return ProgressReading(
            position_s=self._position_s,
            duration_s=self.duration_s,
            elapsed_s=elapsed,
            speed_x=speed,
            eta_s=eta,
            partial=self._partial,
        )
