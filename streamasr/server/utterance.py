"""One utterance of one connection, as the scheduler keeps it (server/scheduler.py).

Its session, the audio not yet fed, where its events go, and how long its steps waited
once due: the state the scheduler's rounds read and change, all on the event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from streamasr.output.finishing import NONE, Finishing, finished
from streamasr.output.render import Renderer
from streamasr.server.protocol import SessionConfig
from streamasr.session.events import Event, StreamSummary
from streamasr.session.stream import StreamSession

#: What the scheduler delivers: an utterance's events, and its summary once it is closed.
Delivered = Event | StreamSummary


class _Outbox:
    """A renderer (behind the finishing steps) that keeps what is to be delivered."""

    def __init__(self) -> None:
        self.items: list[Delivered] = []

    def begin(self, source: str) -> None:
        pass

    def event(self, event: Event) -> None:
        self.items.append(event)

    def end(self, summary: StreamSummary) -> None:
        self.items.append(summary)

    def take(self) -> list[Delivered]:
        items, self.items = self.items, []
        return items


@dataclass
class _Waits:
    """How long an utterance's steps waited to start after they came due."""

    total_s: float = 0.0
    longest_s: float = 0.0
    steps: int = 0

    def add(self, seconds: float) -> None:
        self.total_s += seconds
        self.longest_s = max(self.longest_s, seconds)
        self.steps += 1

    def summary_ms(self) -> tuple[float, float]:
        """(mean, longest) in milliseconds."""
        mean = self.total_s / self.steps if self.steps else 0.0
        return round(mean * 1000, 3), round(self.longest_s * 1000, 3)


@dataclass(eq=False)
class Utterance:
    """One utterance of one connection: its session, audio not yet fed, where events go.

    Everything is used on the event loop; only the engine call of a round runs on the
    worker thread, while the utterance is in that round (`in_round`) and nothing feeds it.
    """

    session: StreamSession
    config: SessionConfig
    deliver: Callable[[list[Delivered]], None]
    fail: Callable[[str], None]
    block_samples: int
    per_message: bool = False  # each message ends a block (else: fixed blocks)
    finishing: Finishing = NONE  # the session's finishing steps (punctuation, casing)
    outbox: _Outbox = field(default_factory=_Outbox)
    renderer: Renderer = field(init=False)
    pending: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    blocks: deque[np.ndarray] = field(default_factory=deque)
    queued_samples: int = 0
    ending: bool = False  # the client ended the input
    padded: bool = False  # the tail padding is in and the engine told no more audio comes
    ended: bool = False  # closed: last final and summary rendered
    in_round: bool = False  # its engine step runs now
    check: bool = False  # fed or stepped since it was last found not ready: try a step
    discarded: bool = False
    due_at_s: float | None = None  # when its step came due (the scheduler's clock)
    waits: _Waits = field(default_factory=lambda: _Waits())
    done: asyncio.Future[None] | None = None
    drained: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.renderer = finished(self.outbox, self.finishing)
        self.renderer.begin(self.config.source)

    @property
    def queued_s(self) -> float:
        """Seconds of audio received and not yet fed to the engine."""
        return self.queued_samples / self.config.sample_rate
