"""A client of `streamasr serve` with the face of a local model.

    import streamasr
    with streamasr.connect("ws://127.0.0.1:6006/ws") as model:
        for event in model.stream(blocks, sample_rate=16000, name="talk.wav"):
            print(event.kind, event.audio_s, getattr(event, "text", ""))
        summary = model.transcribe(audio, 16000)

`stream` yields the Event objects `open_model(...).stream` yields for the same audio fed in
blocks of one chunk with its tail padding, its defaults (the clocks aside): the session asks
the server for those (`settings`), the server cuts the audio into such feed blocks whatever
the blocks given here, sends the events as JSON, and they are rebuilt here. The samples go
as f32le, so the server decodes exactly the floats given. One connection carries every
utterance of a RemoteModel, one after another.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamasr.errors import InputError, StreamAsrError
from streamasr.extras import install_hint
from streamasr.session.events import (
    EVENT_TYPES,
    WIRE_VERSION,
    Event,
    Final,
    StreamSummary,
    event_from_dict,
)
from streamasr.session.stream import DEFAULT_TAIL_PADDING_S

#: What a local model's stream uses unless told otherwise: feed blocks of one chunk, the
#: default tail padding (so a RemoteModel gives its events whatever the server's defaults).
LOCAL_SETTINGS: dict[str, Any] = {"block_ms": "chunk", "tail_padding_s": DEFAULT_TAIL_PADDING_S}
__all__ = ["EVENT_TYPES", "RemoteModel", "RemoteSession", "ServerError", "connect"]
#: Where a URL without a path goes: the server's WebSocket route.
WS_PATH = "/ws"


class ServerError(StreamAsrError):
    """The server could not be reached, refused the connection or closed it; says why."""


def event_from_record(record: dict[str, Any]) -> Event:
    """An event object from one JSON record the server (or `file --format jsonl`) wrote; a
    record of a later wire version than this client reads is refused, not misread."""
    version = record.get("v", WIRE_VERSION)
    if not isinstance(version, int) or version > WIRE_VERSION:
        raise ServerError(
            f"the server sends events of wire version {version!r}; this client reads up to "
            f"{WIRE_VERSION}: upgrade streamasr here (pip install -U streamasr)"
        )
    try:
        return event_from_dict(record)
    except ValueError as exc:
        raise ServerError(f"the server sent an event this client cannot read: {exc}") from None


def with_ws_path(url: str) -> str:
    """`url` with the server's WebSocket path when it names none (ws://HOST:PORT -> /ws)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return url  # the WebSocket client says what is wrong with it
    if parts.scheme in ("ws", "wss") and parts.path in ("", "/"):
        return urlunsplit(parts._replace(path=WS_PATH))
    return url


def summary_from_record(record: dict[str, Any], finals: Iterable[Final]) -> StreamSummary:
    """The summary object from the server's summary record and the finals seen before it."""
    return StreamSummary(
        source=record["source"],
        audio_s=record["audio_s"],
        compute_s=record["compute_s"],
        wall_s=record["wall_s"],
        text=record["text"],
        finals=tuple(finals),
        first_token_latency_s=record.get("first_token_latency_s"),
        first_token_wall_latency_s=record.get("first_token_wall_latency_s"),
        revisions=record.get("revisions", 0),
    )


@dataclass
class RemoteModel:
    """A model served by `streamasr serve`; `connect()` makes one."""

    url: str
    token: str | None = None
    open_timeout_s: float = 30.0
    # per-session settings sent with every config (block_ms, tail_padding_s, endpoint,
    # rule1_s, rule2_s, rule3_s): by default open_model()'s feed block and tail padding
    settings: dict[str, Any] = field(default_factory=lambda: dict(LOCAL_SETTINGS))
    last_summary: StreamSummary | None = None
    _ws: Any = field(default=None, repr=False)

    def open(self) -> None:
        """Connect now rather than at the first stream (a wrong URL, a refused token or a
        full server is then said before any audio is captured)."""
        self._connection()

    def _connection(self) -> Any:
        if self._ws is not None:
            return self._ws
        from websockets.exceptions import InvalidHandshake, InvalidURI
        from websockets.sync.client import connect as ws_connect

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        try:
            connection = ws_connect(
                with_ws_path(self.url),
                additional_headers=headers,
                open_timeout=self.open_timeout_s,
                compression=None,
                max_size=None,
            )
            # entered as a context manager (closed in close()): what websockets >= 16 asks
            self._ws = connection.__enter__()
        except InvalidURI:
            raise ServerError(
                f"{self.url!r} is not a WebSocket URL; give ws://HOST:PORT/ws (or wss://)"
            ) from None
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            raise ServerError(f"cannot connect to {self.url}: {exc}") from None
        return self._ws

    def stream(
        self,
        blocks: Iterable[np.ndarray],
        sample_rate: int,
        name: str = "",
        realtime: bool = False,
    ) -> Iterator[Event]:
        """Send mono float32 blocks; yield events as the server sends them, then the last
        final. The summary is kept in `last_summary`."""
        session = self.session(sample_rate, name, realtime)
        yield from session.run(blocks)
        self.last_summary = session.received_summary

    def session(self, sample_rate: int, name: str = "", realtime: bool = False) -> RemoteSession:
        """One utterance stream on this connection with a StreamSession's face (`feed`,
        `finish`, `run`, `summary`), for the one driver (`streamasr.session.driver.drive`)."""
        self.last_summary = None
        return RemoteSession(self, sample_rate, name, realtime)

    def transcribe(self, audio: np.ndarray, sample_rate: int, name: str = "") -> StreamSummary:
        """Send a whole array and return the summary (text, finals, timing)."""
        step = max(1, sample_rate // 10)
        blocks = (audio[start : start + step] for start in range(0, len(audio), step))
        self.last_summary = None
        for _ in self.stream(blocks, sample_rate, name):
            pass
        if self.last_summary is None:
            raise ServerError("the server ended the utterance without a summary")
        return self.last_summary

    def close(self) -> None:
        """Close the connection (a later stream() opens a new one)."""
        if self._ws is not None:
            self._ws.close()
            self._ws = None

    def __enter__(self) -> RemoteModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteSession:
    """One utterance stream on a RemoteModel's connection, fed like a local StreamSession.

    Why: `streamasr mic --server` runs the live loop (streamasr.devices.live: saving, level meter,
    backlog warnings, the flush on Ctrl-C) through the one driver, which feeds a session
    block by block and finishes it on every exit path; this is that session, decoded by
    the server. `feed` sends a block and returns the events already sent back; `finish`
    sends the end and returns the rest, up to the server's summary.
    """

    def __init__(self, model: RemoteModel, sample_rate: int, name: str, realtime: bool) -> None:
        self.model = model
        self.sample_rate = sample_rate
        self.source_name = name or "ws"
        self.realtime = realtime
        self.received_summary: StreamSummary | None = None
        self._finals: list[Final] = []
        self._samples = 0
        self._started = self._finished = False

    def run(self, blocks: Iterable[np.ndarray]) -> Iterator[Event]:
        """Feed every block, then finish; yields events as they come."""
        for block in blocks:
            yield from self.feed(block)
        yield from self.finish()

    def feed(self, samples: np.ndarray) -> list[Event]:
        """Send one block; the events the server has sent so far."""
        with self._closed_as_error():
            ws = self._open()
            ws.send(np.ascontiguousarray(samples, "<f4").tobytes())
            self._samples += len(samples)
            events: list[Event] = []
            while (message := _poll(ws)) is not None:
                record = json.loads(message)
                if record.get("type") == "summary":
                    raise ServerError("the server sent a summary before the end of input")
                events.append(self._take(record))
            return events

    def finish(self) -> list[Event]:
        """End the input: the remaining events, up to the summary (an input of no audio
        still gets its config, end and summary)."""
        if self._finished:
            return []
        self._finished = True
        events: list[Event] = []
        with self._closed_as_error():
            ws = self._open()
            ws.send(json.dumps({"type": "end"}))
            while True:
                record = json.loads(ws.recv())
                if record.get("type") == "summary":
                    self.received_summary = summary_from_record(record, self._finals)
                    return events
                events.append(self._take(record))

    def summary(self) -> StreamSummary:
        """The server's summary; before it came (the connection failed), what came so far."""
        if self.received_summary is not None:
            return self.received_summary
        return StreamSummary(
            source=self.source_name,
            audio_s=self._samples / self.sample_rate,
            compute_s=0.0,
            wall_s=0.0,
            text=" ".join(final.text for final in self._finals),
            finals=tuple(self._finals),
        )

    def _open(self) -> Any:
        ws = self.model._connection()
        if not self._started:
            self._started = True
            config = {"sample_rate": self.sample_rate, "format": "f32le", "channels": 1,
                      "source": self.source_name, "realtime": self.realtime,
                      **self.model.settings}  # fmt: skip
            ws.send(json.dumps(config))
        return ws

    def _take(self, record: dict[str, Any]) -> Event:
        event = event_from_record(record)
        if isinstance(event, Final):
            self._finals.append(event)
        return event

    @contextmanager
    def _closed_as_error(self) -> Iterator[None]:
        """A closed connection is an error that says the server's code and reason."""
        from websockets.exceptions import ConnectionClosed

        try:
            yield
        except ConnectionClosed as exc:
            self.model._ws = None
            self._finished = True
            reason = exc.rcvd.reason if exc.rcvd is not None else "no reason given"
            code = exc.rcvd.code if exc.rcvd is not None else None
            error = InputError if code in (1003, 1007, 1009) else ServerError
            raise error(f"the server closed the connection ({code}): {reason}") from None


def _poll(ws: Any) -> str | bytes | None:
    """A message the server already sent, without waiting; None when there is none."""
    try:
        message: str | bytes = ws.recv(timeout=0)
    except TimeoutError:
        return None
    return message


def connect(url: str, token: str | None = None, open_timeout_s: float = 30.0) -> RemoteModel:
    """A model served by `streamasr serve` at `url` (ws://HOST:PORT/ws); the connection opens
    with the first stream. Needs `pip install 'streamasr[serve]'`."""
    try:
        import websockets  # noqa: F401
    except ImportError:
        from streamasr.errors import DependencyError

        raise DependencyError(
            f"streamasr.connect needs websockets: {install_hint('serve')}"
        ) from None
    return RemoteModel(url, token, open_timeout_s)
