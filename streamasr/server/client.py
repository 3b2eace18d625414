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
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamasr.errors import InputError
from streamasr.extras import install_hint
from streamasr.server.client_connect import WS_PATH, open_connection, with_ws_path
from streamasr.server.client_records import (
    ServerError,
    event_from_record,
    read_record,
    summary_from_record,
)
from streamasr.session.events import EVENT_TYPES, Event, Final, FirstToken, Partial, StreamSummary
from streamasr.session.stream import DEFAULT_TAIL_PADDING_S

#: What a local model's stream uses unless told otherwise: feed blocks of one chunk, the
#: default tail padding (so a RemoteModel gives its events whatever the server's defaults).
LOCAL_SETTINGS: dict[str, Any] = {"block_ms": "chunk", "tail_padding_s": DEFAULT_TAIL_PADDING_S}
__all__ = ["EVENT_TYPES", "WS_PATH", "RemoteModel", "RemoteSession", "ServerError", "connect",
           "event_from_record", "with_ws_path"]  # fmt: skip
#: After the end of input, how long the client waits for the summary at least; the audio
#: the server has not yet answered for is added (it may still be decoding a backlog).
FINISH_TIMEOUT_S = 30.0


@dataclass
class RemoteModel:
    """A model served by `streamasr serve`; `connect()` makes one."""

    url: str
    token: str | None = None
    open_timeout_s: float = 30.0
    # after the end of input: the least wait for the summary (FINISH_TIMEOUT_S says more)
    finish_timeout_s: float = FINISH_TIMEOUT_S
    cafile: str | None = None  # PEM certificates to trust for wss:// (a self-signed server)
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
        if self._ws is None:
            self._ws = open_connection(self.url, self.token, self.open_timeout_s, self.cafile)
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
        """Close the connection (a later stream() opens a new one); a connection that
        fails as it closes is dropped all the same (what it carried was already read)."""
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception:  # noqa: BLE001 - a broken connection has nothing left to say
                pass

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
    sends the end and returns the rest, up to the server's summary. Events read are kept
    until handed on: when the server fails (closes, stops answering, sends what cannot be
    read), the error goes up and the driver's `finish` still returns those already read.
    """

    def __init__(self, model: RemoteModel, sample_rate: int, name: str, realtime: bool) -> None:
        self.model = model
        self.sample_rate = sample_rate
        self.source_name = name or "ws"
        self.realtime = realtime
        self.received_summary: StreamSummary | None = None
        self._finals: list[Final] = []
        self._pending: list[Event] = []
        self._first_token: FirstToken | None = None
        self._revisions = 0
        self._answered_s = 0.0  # the latest audio time an event was sent for
        self._samples = 0
        self._started = self._finished = False

    def run(self, blocks: Iterable[np.ndarray]) -> Iterator[Event]:
        """Feed every block, then finish; yields events as they come."""
        for block in blocks:
            yield from self.feed(block)
        yield from self.finish()

    def feed(self, samples: np.ndarray) -> list[Event]:
        """Send one block; the events the server has sent so far."""
        if self._finished:
            raise ServerError("the stream has ended; open a new session")
        with self._failures():
            ws = self._open()
            ws.send(np.ascontiguousarray(samples, "<f4").tobytes())
            self._samples += len(samples)
            while (message := _poll(ws)) is not None:
                if self._take(read_record(message)):
                    raise ServerError(
                        f"the server ended the stream after {self.sent_s:.2f} s, before the "
                        "end of the input (it sent its summary)"
                    )
        return self._handed_on()

    def finish(self) -> list[Event]:
        """End the input: the remaining events, up to the summary (an input of no audio
        still gets its config, end and summary). After a failure: the events read and not
        yet handed on. The summary must come within `finish_timeout_s` plus the audio the
        server has not yet answered for, else a ServerError."""
        if self._finished:
            return self._handed_on()
        self._finished = True
        with self._failures():
            ws = self._open()
            ws.send(json.dumps({"type": "end"}))
            limit_s = self.model.finish_timeout_s + max(0.0, self.sent_s - self._answered_s)
            deadline = time.monotonic() + limit_s
            while not self._take(read_record(_within(ws, deadline, limit_s))):
                pass
        return self._handed_on()

    @property
    def sent_s(self) -> float:
        """Seconds of audio sent so far."""
        return self._samples / self.sample_rate

    def summary(self) -> StreamSummary:
        """The server's summary; before it came (the connection failed), what came so far."""
        if self.received_summary is not None:
            return self.received_summary
        first = self._first_token
        return StreamSummary(
            source=self.source_name,
            audio_s=self.sent_s,
            compute_s=0.0,
            wall_s=0.0,
            text=" ".join(final.text for final in self._finals),
            finals=tuple(self._finals),
            first_token_latency_s=first.latency_s if first is not None else None,
            revisions=self._revisions,
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

    def _take(self, record: dict[str, Any]) -> bool:
        """Keep one record's event for handing on; True for the summary (then kept)."""
        if record["type"] == "summary":
            self.received_summary = summary_from_record(record, self._finals)
            self._finished = True
            return True
        event = event_from_record(record)
        if isinstance(event, Final):
            self._finals.append(event)
        elif isinstance(event, FirstToken) and self._first_token is None:
            self._first_token = event
        elif isinstance(event, Partial):
            self._revisions += 1
        self._answered_s = max(self._answered_s, event.audio_s)
        self._pending.append(event)
        return False

    def _handed_on(self) -> list[Event]:
        events, self._pending = self._pending, []
        return events

    @contextmanager
    def _failures(self) -> Iterator[None]:
        """Any failure ends the stream and drops the connection (a later session opens a
        new one); a closed connection says the server's code and reason, or that the
        client refused an oversized message. What was read stays pending."""
        from websockets.exceptions import ConnectionClosed

        try:
            yield
        except ConnectionClosed as exc:
            self._finished = True
            self._salvage()
            self.model.close()
            error = InputError if _code(exc) in (1003, 1007, 1009) else ServerError
            raise error(f"{_closed(exc)}; {self._received()}") from None
        except ServerError as exc:
            self._finished = True
            self.model.close()
            raise ServerError(f"{exc}; {self._received()}") from None

    def _salvage(self) -> None:
        """The messages that came before the close and were not yet read (a send fails at
        once on a closed connection, with the server's last final still queued here)."""
        from websockets.exceptions import ConnectionClosed

        ws = self.model._ws
        try:
            while ws is not None and (message := _poll(ws)) is not None:
                if self._take(read_record(message)):
                    return
        except (ConnectionClosed, ServerError):
            return

    def _received(self) -> str:
        finals = len(self._finals)
        return (f"{self.sent_s:.2f} s of audio sent, {finals} final{'s' * (finals != 1)} "
                "received before it")  # fmt: skip


def _code(exc: Any) -> int | None:
    if _refused_by_client(exc):
        return None
    return exc.rcvd.code if exc.rcvd is not None else None


def _refused_by_client(exc: Any) -> bool:
    """This client closed with 1009: the server's message was over MAX_MESSAGE_BYTES."""
    sent_first = exc.rcvd is None or exc.rcvd_then_sent is False
    return exc.sent is not None and exc.sent.code == 1009 and sent_first


def _closed(exc: Any) -> str:
    """Why the connection closed, in words."""
    from streamasr.server.client_connect import MAX_MESSAGE_BYTES

    if _refused_by_client(exc):
        return (f"the server sent a message over {MAX_MESSAGE_BYTES // (1024 * 1024)} MiB, "
                "larger than any event; the client closed the connection")  # fmt: skip
    if exc.rcvd is not None:
        reason = exc.rcvd.reason or "no reason given"
        return f"the server closed the connection ({exc.rcvd.code}): {reason}"
    return ("the server closed the connection without a word (it stopped, or the network "
            "failed)")  # fmt: skip


def _within(ws: Any, deadline: float, limit_s: float) -> str | bytes:
    """The next message, if it comes before `deadline`."""
    try:
        message: str | bytes = ws.recv(timeout=max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        raise ServerError(
            f"the server sent no summary within {limit_s:.0f} s of the end of the input"
        ) from None
    return message


def _poll(ws: Any) -> str | bytes | None:
    """A message the server already sent, without waiting; None when there is none."""
    try:
        message: str | bytes = ws.recv(timeout=0)
    except TimeoutError:
        return None
    return message


def connect(
    url: str, token: str | None = None, open_timeout_s: float = 30.0, cafile: str | None = None
) -> RemoteModel:
    """A model served by `streamasr serve` at `url` (ws://HOST:PORT/ws); the connection opens
    with the first stream. `cafile`: PEM certificates to trust (a self-signed wss:// server).
    Needs `pip install 'streamasr[serve]'`."""
    try:
        import websockets  # noqa: F401
    except ImportError:
        from streamasr.errors import DependencyError

        raise DependencyError(
            f"streamasr.connect needs websockets: {install_hint('serve')}"
        ) from None
    return RemoteModel(url, token, open_timeout_s, cafile=cafile)
