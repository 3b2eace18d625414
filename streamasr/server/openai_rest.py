"""OpenAI's speech-to-text REST API on the server's scheduler, for the tools that speak it.

    POST /v1/audio/transcriptions   an audio file (multipart) -> its transcript
    GET  /v1/models                 the model this server has
    GET  /v1/models/{id}

An upload is one `ClientSession` (server/client_session.py): it holds a connection slot
(429 when the server is full, 503 while it stops), and its audio, decoded from the file by
`FileSource` as `streamasr file` decodes it, is fed as fast as the engine takes it,
batched with the live sessions by the same scheduler. It is cut in the server's feed
blocks with the server's tail padding, endpoint rules and finishing, so its text is what
`streamasr file --block-ms 100 --tail-padding 0.3` prints (the server's live defaults).
The responses are built by the `file` command's renderers (text, SRT, WebVTT), and its
words (verbose_json) by the same word rule.

Why a gate before the body: FastAPI reads a form before a route's dependencies run, so
the token, the content type and the declared size are checked first (`_GatedRoute`), and
the body is counted as it arrives: a 2 GB upload is refused after the limit's bytes, not
written to disk whole. Errors under /v1 are OpenAI's error object.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic import BaseModel, Field
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Message

from streamasr.errors import InputError
from streamasr.server.client_session import ClientSession, EngineFailed, Refused
from streamasr.server.protocol import CHUNK, SessionConfig
from streamasr.server.room_feeds import TRANSCRIPTS
from streamasr.server.utterance import Delivered
from streamasr.session.events import Final, StreamSummary
from streamasr.text.captions import even_words
from streamasr.text.tokens import split_words

if TYPE_CHECKING:
    from streamasr.audio.files import FileSource
    from streamasr.server.app import StreamServer

log = logging.getLogger("streamasr")

TRANSCRIPTIONS = "/v1/audio/transcriptions"
MODELS = "/v1/models"
#: OpenAI's model names, taken as the server's one model: apps that cannot change the name
#: they send still work (the `X-Streamasr-Model` header says which model answered).
ALIASES = ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe")
ResponseFormat = Literal["json", "text", "srt", "vtt", "verbose_json"]
Granularity = Literal["word", "segment"]
#: The text formats' content types (as the rooms' transcripts are served).
TEXT_TYPES = {"text": TRANSCRIPTS["txt"], "srt": TRANSCRIPTS["srt"], "vtt": TRANSCRIPTS["vtt"]}
#: Audio read from the file per step (fed with back-pressure: ClientSession.feed).
READ_BLOCK_S = 2.0
#: An upload refused before its end: the connection closes, so the client stops sending
#: (kept open, uvicorn would read and discard the rest to reuse it).
CLOSE = {"Connection": "close"}
SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


# -- the documents (OpenAI's shapes; the schema at /openapi.json) -----------------------------


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    """OpenAI's error object."""

    error: ErrorDetail


class Usage(BaseModel):
    type: Literal["duration"] = "duration"
    seconds: float = Field(description="The audio's duration")


class Transcription(BaseModel):
    text: str = Field(description="The finals, joined by spaces")
    usage: Usage


class TranscriptionSegment(BaseModel):
    """One final (an utterance the endpoint rules ended). Whisper's decoding statistics do
    not exist for this engine: they hold neutral values (0), `tokens` is empty."""

    id: int
    seek: int = 0
    start: float
    end: float
    text: str
    tokens: list[int] = []
    temperature: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0


class TranscriptionWord(BaseModel):
    word: str
    start: float
    end: float


class TranscriptionVerbose(BaseModel):
    task: Literal["transcribe"] = "transcribe"
    language: str
    duration: float
    text: str
    segments: list[TranscriptionSegment] | None = None
    words: list[TranscriptionWord] | None = None
    usage: Usage


class StreamingSettings(BaseModel):
    """How an upload (and a live session that asks nothing) is fed and cut."""

    block_ms: float | None = Field(description="Feed block; null: one engine chunk")
    tail_padding_s: float
    endpoint: bool
    rule1_s: float
    rule2_s: float
    rule3_s: float
    punctuate: bool
    sentence_case: bool


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "streamasr"
    engine: str
    device: str
    language: str = Field(description="The model's language code; empty: not declared")
    sample_rate_hz: int
    chunk_ms: float
    lookahead_ms: float
    settings: dict[str, Any]
    streaming: StreamingSettings
    aliases: list[str]


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# -- errors --------------------------------------------------------------------------------


class ApiError(Exception):
    """An OpenAI error response: status, message (saying what to do), type, param, code."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers

    @property
    def type(self) -> str:
        if self.status == 401:
            return "authentication_error"
        if self.status == 429:
            return "rate_limit_error"
        return "server_error" if self.status >= 500 else "invalid_request_error"

    def body(self) -> dict[str, Any]:
        detail = ErrorDetail(message=self.message, type=self.type, param=self.param,
                             code=self.code)  # fmt: skip
        return {"error": detail.model_dump()}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), self.status, headers=self.headers)


class _UploadTooLarge(StarletteHTTPException):
    """Raised by the counting receive; FastAPI lets an HTTPException through its form
    parsing (any other error there becomes a plain 400)."""


def _error_docs(*statuses: int) -> dict[int | str, dict[str, Any]]:
    reasons = {
        400: "Bad or unreadable audio, no `file`, a field out of range",
        401: "Missing or wrong token (`Authorization: Bearer TOKEN` or `X-API-Key: TOKEN`)",
        404: "No such model",
        413: "The upload is larger than `serve --max-upload-mb`",
        415: "Not `multipart/form-data`",
        429: "The server is at --max-connections; try again later",
        500: "The engine failed",
        503: "The server is shutting down",
    }
    docs: dict[int | str, dict[str, Any]] = {
        status: {"model": ErrorBody, "description": reasons[status]} for status in statuses
    }
    docs["4XX"] = {"model": ErrorBody, "description": "Any other client error (OpenAI's shape)"}
    return docs


def _validation_error(exc: RequestValidationError) -> ApiError:
    """FastAPI's 422 as OpenAI's 400, naming the field and what it takes."""
    first = exc.errors()[0] if exc.errors() else {}
    loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path")]
    param = loc[0] if loc else None
    if param == "file":
        message = "no file: send the audio as the multipart field `file` (curl -F file=@a.wav)"
    elif param == "response_format":
        message = "response_format must be one of json, text, srt, vtt, verbose_json"
    elif param == "timestamp_granularities[]":
        message = "timestamp_granularities[] takes word and/or segment"
    else:
        message = f"{param or 'request'}: {first.get('msg', 'invalid')}"
    return ApiError(400, message, param=param, code="invalid_value")


# -- the gate: token, content type and size before the body -------------------------------


def presented_key(request: Request) -> str | None:
    """`Authorization: Bearer KEY` (the OpenAI SDK) or `X-API-Key: KEY`."""
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def _server(request: Request) -> StreamServer:
    server: StreamServer = request.app.state.server
    return server


def _check_token(request: Request) -> None:
    server = _server(request)
    if not server.security.allows(presented_key(request)):
        server.metrics.refused.labels("auth").inc()
        raise ApiError(
            401,
            "missing or wrong API key: send the server's token (serve --token-file) as "
            "'Authorization: Bearer TOKEN' or 'X-API-Key: TOKEN'",
            code="invalid_api_key",
        )


def _counted(request: Request) -> Request:
    """The upload's request, refused by type and declared size before its body is read,
    its body counted as it arrives (a chunked body has no Content-Length)."""
    limit = _server(request).limits.max_upload_bytes
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "multipart/form-data":
        raise ApiError(
            415,
            f"send multipart/form-data (curl -F file=@a.wav); got {kind or 'no content type'}",
            code="unsupported_media_type",
        )
    too_large = (
        f"the upload is larger than this server takes ({limit / 1e6:g} MB, serve "
        "--max-upload-mb); send a shorter or compressed file (flac, opus, mp3)"
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, too_large, "file", "file_too_large", CLOSE)
    received = 0
    receive = request.receive

    async def counting() -> Message:
        nonlocal received
        message = await receive()
        received += len(message.get("body", b""))
        if received > limit:
            raise _UploadTooLarge(413, too_large)
        return message

    return Request(request.scope, counting)


class _GatedRoute(APIRoute):
    """A /v1 route: the token first, an upload's type and size before its body, and every
    error (FastAPI's own too) as OpenAI's error object."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        upload = self.path == TRANSCRIPTIONS

        async def gated(request: Request) -> Response:
            try:
                _check_token(request)
                return await handler(_counted(request) if upload else request)
            except ApiError as exc:
                return exc.response()
            except RequestValidationError as exc:
                return _validation_error(exc).response()
            except _UploadTooLarge as exc:
                return ApiError(413, str(exc.detail), "file", "file_too_large", CLOSE).response()
            except StarletteHTTPException as exc:
                return ApiError(exc.status_code, str(exc.detail)).response()

        return gated


bearer = HTTPBearer(auto_error=False, description="The server's token (serve --token-file)")
router = APIRouter(
    route_class=_GatedRoute, tags=["OpenAI-compatible"], dependencies=[Depends(bearer)]
)


# -- models --------------------------------------------------------------------------------


def model_card(server: StreamServer) -> ModelCard:
    """The server's model, with its engine and the uploads' streaming settings."""
    info = server.recognizer.info
    options = server.options
    endpoint = options.endpoint
    finishing = server.scheduler.finishing
    created = max((int(path.stat().st_mtime) for path in info.model_files if path.exists()),
                  default=0)  # fmt: skip
    return ModelCard(
        id=info.model_name, created=created, engine=info.backend, device=info.device,
        language=info.language, sample_rate_hz=info.sample_rate_hz,
        chunk_ms=round(info.chunk_s * 1000, 3), lookahead_ms=round(info.lookahead_s * 1000, 3),
        settings={key: _plain(value) for key, value in info.settings.items()},
        streaming=StreamingSettings(
            block_ms=None if options.block_s is None else round(options.block_s * 1000, 3),
            tail_padding_s=options.tail_padding_s, endpoint=endpoint.enabled,
            rule1_s=endpoint.rule1_s, rule2_s=endpoint.rule2_s, rule3_s=endpoint.rule3_s,
            punctuate=finishing.punctuate is not None, sentence_case=finishing.sentence_case,
        ),
        aliases=list(ALIASES),
    )  # fmt: skip


def _plain(value: object) -> object:
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def _model_named(server: StreamServer, name: str | None) -> ModelCard:
    """The card of the model `name` asks for (its id or an alias; none: the server's)."""
    card = model_card(server)
    if name is None or name == "" or name == card.id or name in ALIASES:
        return card
    raise ApiError(
        400,
        f"model {name!r} is not on this server; it has {card.id!r} (also answers to "
        f"{', '.join(ALIASES)})",
        param="model", code="model_not_found",
    )  # fmt: skip


@router.get(
    MODELS, summary="The models this server has", response_model=ModelList,
    responses=_error_docs(401),
)  # fmt: skip
def list_models(request: Request) -> ModelList:
    return ModelList(data=[model_card(_server(request))])


@router.get(
    MODELS + "/{model_id}", summary="One model", response_model=ModelCard,
    responses=_error_docs(401, 404),
)  # fmt: skip
def get_model(request: Request, model_id: str) -> ModelCard:
    card = model_card(_server(request))
    if model_id != card.id and model_id not in ALIASES:
        raise ApiError(404, f"no model {model_id!r}; this server has {card.id!r}",
                       param="model", code="model_not_found")  # fmt: skip
    return card


# -- transcriptions ------------------------------------------------------------------------


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


def _failure(exc: BaseException) -> ApiError:
    """What an upload that failed while decoding is told."""
    if isinstance(exc, Refused):
        return _refusal(exc)
    if isinstance(exc, InputError):
        return ApiError(400, str(exc), param="file", code="invalid_audio")
    if isinstance(exc, EngineFailed):
        return ApiError(500, f"the engine failed: {exc}", code="engine_failed")
    log.exception("upload failed", exc_info=exc)
    return ApiError(500, "the server failed to transcribe the upload", code="internal_error")


async def _start(request: Request, file: UploadFile) -> tuple[Upload, asyncio.Task[None], float]:
    """Admit the upload, open its audio, start decoding it: (upload, its task, duration)."""
    server = _server(request)
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


def _words(final: Final) -> list[TranscriptionWord]:
    """The final's words with times (the `file` rule; spread evenly where the engine
    gives no token times, as its subtitles are)."""
    words = final.words or even_words(split_words(final.text), final.start_s, final.end_s)
    return [TranscriptionWord(word=w.text, start=round(w.start_s, 3), end=round(w.end_s, 3))
            for w in words]  # fmt: skip


def _verbose(
    upload: Upload, language: str, duration_s: float, granularities: set[str]
) -> TranscriptionVerbose:
    finals = [final for final in upload.finals if final.text.strip()]
    segments = [
        TranscriptionSegment(id=index, start=round(final.start_s, 3), end=round(final.end_s, 3),
                             text=final.text.strip())  # fmt: skip
        for index, final in enumerate(finals)
    ]
    words = [word for final in finals for word in _words(final)]
    return TranscriptionVerbose(
        language=language, duration=round(duration_s, 3), text=upload.text,
        segments=segments if "segment" in granularities else None,
        words=words if "word" in granularities else None,
        usage=Usage(seconds=round(duration_s, 3)),
    )  # fmt: skip


def _rendered(upload: Upload, fmt: str) -> str:
    """The finals as `streamasr file --format FMT` writes them (its renderers)."""
    from rich.console import Console

    from streamasr.output.render import RENDERERS, RenderTarget

    out = io.StringIO()
    target = RenderTarget(out=out, err=Console(file=io.StringIO()), quiet=True)
    renderer = RENDERERS["text" if fmt == "text" else fmt].make(target)
    renderer.begin("")
    for final in upload.finals:
        renderer.event(final)
    if fmt == "vtt" and not out.getvalue():
        return "WEBVTT\n\n"
    return out.getvalue()


def _check_language(card: ModelCard, language: str | None) -> str:
    """The language to report; 400 when the model declares another one."""
    if language and card.language and language.split("-")[0].lower() != card.language.lower():
        raise ApiError(400, f"language {language!r}: this server's model transcribes "
                            f"{card.language!r}", param="language", code="unsupported_language")
    return card.language or language or ""


def _notes(card: ModelCard, prompt: str | None) -> dict[str, str]:
    headers = {"X-Streamasr-Model": card.id}
    if prompt:
        headers["X-Streamasr-Ignored"] = "prompt (no per-request hotwords; serve --hotwords)"
    return headers


async def _events(upload: Upload, task: asyncio.Task[None]) -> AsyncIterator[ServerSentEvent]:
    """OpenAI's transcription stream: a delta per final as it is decoded, then the text."""
    try:
        sent = 0
        while (final := await upload.queue.get()) is not None:
            text = final.text.strip()
            if text:
                delta = text if sent == 0 else " " + text
                sent += 1
                yield _sse({"type": "transcript.text.delta", "delta": delta})
        error = task.exception() if not task.cancelled() else None
        if error is not None:
            yield _sse(_failure(error).body())
            return
        yield _sse({"type": "transcript.text.done", "text": upload.text})
    finally:
        task.cancel()  # the client left: decoding stops and the slot is given back
        with contextlib.suppress(BaseException):
            await task


def _sse(data: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(data, ensure_ascii=False))


FileField = Annotated[
    UploadFile, File(description="Audio in any format `streamasr file` reads (wav, flac, "
                     "ogg/opus, mp3, aiff)"),
]  # fmt: skip
ModelField = Annotated[
    str | None,
    Form(description="The server's model id (GET /v1/models) or an OpenAI name "
         f"({', '.join(ALIASES)}); omitted: the server's"),
]  # fmt: skip
LanguageField = Annotated[
    str | None, Form(description="ISO-639-1 code; refused when the model declares another")
]
PromptField = Annotated[
    str | None, Form(description="Ignored (no per-request hotwords; serve --hotwords)")
]
FormatField = Annotated[ResponseFormat, Form()]
TemperatureField = Annotated[
    float | None, Form(description="Ignored: the engine's decoding is the server's")
]
GranularitiesField = Annotated[
    list[Granularity] | None,
    Form(alias="timestamp_granularities[]", description="verbose_json: word and/or segment"),
]
StreamField = Annotated[bool, Form(description="Server-Sent Events as the audio is decoded")]

TRANSCRIPTION_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "model": Transcription | TranscriptionVerbose,
        "description": "The transcript: JSON (json, verbose_json), text, SRT or WebVTT by "
        "`response_format`; with `stream=true`, Server-Sent Events "
        '`{"type": "transcript.text.delta", "delta": ...}` per final, then '
        '`{"type": "transcript.text.done", "text": ...}`',
        "content": {
            "text/plain": {"schema": {"type": "string"}},
            "application/x-subrip": {"schema": {"type": "string"}},
            "text/vtt": {"schema": {"type": "string"}},
            "text/event-stream": {"schema": {"type": "string"}},
        },
    },
    **_error_docs(400, 401, 413, 415, 429, 500, 503),
}


@router.post(
    TRANSCRIPTIONS,
    summary="Transcribe an audio file",
    response_class=Response,
    responses=TRANSCRIPTION_RESPONSES,
)
async def create_transcription(
    request: Request,
    file: FileField,
    model: ModelField = None,
    language: LanguageField = None,
    prompt: PromptField = None,
    response_format: FormatField = "json",
    temperature: TemperatureField = None,
    timestamp_granularities: GranularitiesField = None,
    stream: StreamField = False,
) -> Response:
    """An audio file's transcript, decoded as `streamasr file` decodes it, batched with the
    live sessions."""
    server = _server(request)
    card = _model_named(server, model)
    language_code = _check_language(card, language)
    headers = _notes(card, prompt)
    upload, task, duration_s = await _start(request, file)
    if stream:
        return EventSourceResponse(_events(upload, task), headers={**SSE_HEADERS, **headers},
                                   sep="\n", send_timeout=30)  # fmt: skip
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        raise
    except BaseException as exc:  # noqa: BLE001 - said to the client in OpenAI's shape
        raise _failure(exc) from None
    if response_format in TEXT_TYPES:
        return Response(_rendered(upload, response_format), media_type=TEXT_TYPES[response_format],
                        headers=headers)  # fmt: skip
    document: BaseModel
    if response_format == "verbose_json":
        document = _verbose(upload, language_code, duration_s,
                            set(timestamp_granularities or ["segment"]))  # fmt: skip
    else:
        document = Transcription(text=upload.text, usage=Usage(seconds=round(duration_s, 3)))
    return JSONResponse(document.model_dump(exclude_none=True), headers=headers)


@router.api_route(
    "/v1/audio/{rest:path}", include_in_schema=False,
    methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
)  # fmt: skip
@router.api_route(
    "/v1/models{rest:path}", include_in_schema=False,
    methods=["POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
)  # fmt: skip
def elsewhere(request: Request, rest: str) -> Response:
    """What is not here under these prefixes, in OpenAI's shape: 405 for a known path."""
    path = request.url.path.rstrip("/")
    allowed = "POST" if path == TRANSCRIPTIONS else "GET"
    if path in (TRANSCRIPTIONS, MODELS) or path.startswith(MODELS + "/"):
        raise ApiError(405, f"{path} takes {allowed}", code="method_not_allowed",
                       headers={"Allow": allowed})  # fmt: skip
    raise ApiError(404, f"{request.url.path} is not here; the API has {TRANSCRIPTIONS} and "
                        f"{MODELS}", code="not_found")  # fmt: skip
