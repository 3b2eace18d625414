"""The library face: open a model, stream audio into it, get the events the CLI shows.

    import streamasr
    model = streamasr.open_model("tiny-en")
    for event in model.stream(blocks, sample_rate=16000):
        print(event.type, event.audio_s, getattr(event, "text", ""))

The commands are built on these same calls, so a program sees exactly what `streamasr file`
prints: the same partials, first tokens, endpoints and finals, with the same times.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from streamasr.backends import registry
from streamasr.backends.base import BackendInfo, EngineOptions, Recognizer
from streamasr.backends.plan import make_plan
from streamasr.session.driver import Collected, drive, stream_events
from streamasr.session.events import Event, StreamSummary
from streamasr.session.stream import StreamOptions, StreamSession


@dataclass
class Model:
    """A loaded model; `stream()` may be called any number of times, one stream at a time each."""

    recognizer: Recognizer
    stream_options: StreamOptions = StreamOptions()

    @property
    def info(self) -> BackendInfo:
        """What the backend declares: rate, chunk, output frame, files, device."""
        return self.recognizer.info

    def session(self, sample_rate: int, name: str = "") -> StreamSession:
        """A streaming session to feed block by block yourself (`feed`, `finish`, `summary`)."""
        return StreamSession(self.recognizer, sample_rate, name, self.stream_options)

    def stream(
        self, blocks: Iterable[np.ndarray], sample_rate: int, name: str = ""
    ) -> Iterator[Event]:
        """Feed mono float32 blocks; yield events as they happen, then the last final."""
        yield from stream_events(self.session(sample_rate, name), blocks)

    def transcribe(self, audio: np.ndarray, sample_rate: int, name: str = "") -> StreamSummary:
        """Stream a whole array in feed blocks and return the summary (text, finals, timing)."""
        session = self.session(sample_rate, name)
        block = max(1, round(session.block_s * sample_rate))
        blocks = (
            np.ascontiguousarray(audio[start : start + block], np.float32)
            for start in range(0, len(audio), block)
        )
        return drive(session, blocks, Collected())


def open_model(
    model: str | None = None,
    *,
    backend: str | None = None,
    options: EngineOptions | None = None,
    stream_options: StreamOptions | None = None,
    **engine_fields: object,
) -> Model:
    """Load `model` (bundled name, catalog name, folder or `.nemo` file) with its backend.

    Engine settings come as an `EngineOptions` or by name: `threads` and `device`, and the
    options the chosen backend declares (`open_model("tiny-en", threads=1, chunk=32)`),
    parsed and range-checked by that backend as the command line's are; one it does not
    declare is a UsageError naming the backend that owns it.
    """
    base = options or EngineOptions()
    threads = int(engine_fields.pop("threads", base.threads))  # type: ignore[call-overload]
    device = str(engine_fields.pop("device", base.device))
    entry = registry.choose_backend(model, backend)
    given = {**base.own, **engine_fields}
    plan = make_plan(model, backend, given, threads=threads, device=device, entry=entry)
    return Model(plan.load(entry), stream_options or StreamOptions())
