"""An upload of the OpenAI REST API through the scheduler, as one `ClientSession`.

Kept apart from the routes because this is the part that is not HTTP: the file saved where
libsndfile can read it, decoded by `FileSource` as `streamasr file` decodes it, fed as fast
as the engine takes it in the server's feed blocks, and its failures said as OpenAI errors.
The upload holds a connection slot while it decodes (429 when the server is full, 503
while it stops).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from fastapi import Request, UploadFile

from streamasr.errors import InputError
from streamasr.server.client_session import ClientSession, EngineFailed, Refused
from streamasr.server.openai_gate import presented_key, server_of
from streamasr.server.openai_schemas import ApiError
from streamasr.server.protocol import CHUNK, SessionConfig
from streamasr.server.utterance import Delivered
from streamasr.session.events import Final, StreamSummary

if TYPE_CHECKING:
    from streamasr.audio.files import FileSource
    from streamasr.server.app import StreamServer

log = logging.getLogger("streamasr")

#: Audio read from the file per step (fed with back-pressure: ClientSession.feed).
READ_BLOCK_S = 2.0


@dataclass
class Upload:
    """An upload on its way through the scheduler: what was decoded, in order."""

    finals: list[Final] = field(default_factory=list)
    summary: StreamSummary | None = None
    queue: asyncio.Queue[Final | None] = field(default_factory=asyncio.Queue)

    def take(self, items: list[Delivered]) -> None:
        for item in items:
            if isinstance(item, Final):
                self.finals.append(item)
                self.queue.put_nowait(item)
            elif isinstance(item, StreamSummary):
                self.summary = item

    @property
    def texts(self) -> list[str]:
        return [final.text.strip() for final in self.finals if final.text.strip()]

    @property
    def text(self) -> str:
        return " ".join(self.texts)


def _suffix(filename: str | None) -> str:
    """The upload's own suffix, kept for libsndfile's format guess where it is plain."""
    suffix = Path(filename or "").suffix
    return suffix if suffix[1:].isalnum() and len(suffix) <= 8 else ""


def _saved(upload: UploadFile) -> str:
    """The upload in a named temporary file (libsndfile reads a path; Starlette spooled
    the part to an unnamed one)."""
    handle, path = tempfile.mkstemp(prefix="streamasr-upload-", suffix=_suffix(upload.filename))
    with os.fdopen(handle, "wb") as out:
        upload.file.seek(0)
        shutil.copyfileobj(upload.file, out, 1 << 20)
    return path


def _opened(path: str, shown: str) -> FileSource:
    """The saved upload as audio; 400 naming the upload (not the temporary file)."""
    from streamasr.audio.files import FileSource

    try:
        return FileSource(path)
    except InputError as exc:
        message = str(exc).replace(path, shown)
        raise ApiError(400, message, param="file", code="invalid_audio") from None


def _session_config(server: StreamServer, rate: int) -> SessionConfig:
    """An upload's utterance: mono float32 at the file's rate, fixed feed blocks of the
    server's size (as `streamasr file --block-ms`), not paced."""
    block_s = server.options.block_s
    block_ms = CHUNK if block_s is None else block_s * 1000
    return SessionConfig(sample_rate=rate, format="f32le", source="upload", block_ms=block_ms)


async def _decode(
    session: ClientSession, source: FileSource, upload: Upload, cleanup: contextlib.AsyncExitStack
) -> None:
    """Feed the whole file through the session; the finals arrive in `upload` as decoded.
    The admission and the temporary file are let go at the end, whatever happens."""
    async with cleanup:
        await session.open(_session_config(session.server, source.sample_rate))
        blocks: Iterator[np.ndarray] = source.blocks(READ_BLOCK_S)
        while not session.stopped.is_set():
            block = await _next_block(blocks)
            if block is None:
                break
            await session.feed(block)
        await session.finish()
        if session.stop is not None:
            raise Refused("shutting_down", "server shutting down: the transcript stops early")


async def _next_block(blocks: Iterator[np.ndarray]) -> np.ndarray | None:
    """The file's next block, decoded on a thread; a cancelled upload waits for the read
    in flight before its file is closed."""
    reading = asyncio.ensure_future(asyncio.to_thread(next, blocks, None))
    try:
        return await asyncio.shield(reading)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await reading
        raise


def _refusal(exc: Refused) -> ApiError:
    if exc.kind == "capacity":
        return ApiError(429, exc.reason, code="server_full", headers={"Retry-After": "1"})
    return ApiError(503, exc.reason, code="shutting_down")


def failure(exc: BaseException) -> ApiError:
    """What an upload that failed while decoding is told."""
    if isinstance(exc, Refused):
        return _refusal(exc)
    if isinstance(exc, InputError):
        return ApiError(400, str(exc), param="file", code="invalid_audio")
    if isinstance(exc, EngineFailed):
        return ApiError(500, f"the engine failed: {exc}", code="engine_failed")
    log.exception("upload failed", exc_info=exc)
    return ApiError(500, "the server failed to transcribe the upload", code="internal_error")


async def start(request: Request, file: UploadFile) -> tuple[Upload, asyncio.Task[None], float]:
    """Admit the upload, open its audio, start decoding it: (upload, its task, duration)."""
    server = server_of(request)
    cleanup = contextlib.AsyncExitStack()
    try:
        path = await asyncio.to_thread(_saved, file)
        cleanup.callback(os.unlink, path)
        source = await asyncio.to_thread(_opened, path, file.filename or "file")
        cleanup.callback(source.close)
        upload = Upload()
        session = await cleanup.enter_async_context(
            ClientSession.admitted(server, upload.take, presented_key(request))
        )
    except Refused as exc:
        await cleanup.aclose()
        raise _refusal(exc) from None
    except BaseException:
        await cleanup.aclose()
        raise
    task = asyncio.create_task(_decode(session, source, upload, cleanup))
    task.add_done_callback(lambda done: upload.queue.put_nowait(None))
    return upload, task, source.info.duration_s
