"""OpenAI's speech-to-text REST API on the server's scheduler, for the tools that speak it.

    POST /v1/audio/transcriptions   an audio file (multipart) -> its transcript
    GET  /v1/models                 the model this server has
    GET  /v1/models/{id}

An upload is one `ClientSession` (server/client_session.py; openai_upload.py feeds it), batched
with the live sessions by the same scheduler. It is cut in the server's feed blocks with the
server's tail padding, endpoint rules and finishing, so its text is what
`streamasr file --block-ms 100 --tail-padding 0.3` prints (the server's live defaults).
The responses are built by the `file` command's renderers (text, SRT, WebVTT), and its
words (verbose_json) by the same word rule. The token, the content type and the upload's
size are checked before the body is read (openai_gate.py); the documents and the error
object are openai_schemas.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPBearer
from pydantic import BaseModel
from sse_starlette import EventSourceResponse, ServerSentEvent

from streamasr.server.openai_gate import MODELS, TRANSCRIPTIONS, GatedRoute, server_of
from streamasr.server.openai_schemas import (
    ApiError,
    ModelCard,
    ModelList,
    StreamingSettings,
    Transcription,
    TranscriptionSegment,
    TranscriptionVerbose,
    TranscriptionWord,
    Usage,
    error_docs,
)
from streamasr.server.openai_upload import Upload, failure, start
from streamasr.server.room_feeds import TRANSCRIPTS
from streamasr.session.events import Final
from streamasr.text.captions import even_words
from streamasr.text.printable import shown
from streamasr.text.tokens import split_words

if TYPE_CHECKING:
    from streamasr.server.app import StreamServer

#: OpenAI's model names, taken as the server's one model: apps that cannot change the name
#: they send still work (the `X-Streamasr-Model` header says which model answered).
ALIASES = ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe")
ResponseFormat = Literal["json", "text", "srt", "vtt", "verbose_json"]
Granularity = Literal["word", "segment"]
#: The text formats' content types (as the rooms' transcripts are served).
TEXT_TYPES = {"text": TRANSCRIPTS["txt"], "srt": TRANSCRIPTS["srt"], "vtt": TRANSCRIPTS["vtt"]}
SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


bearer = HTTPBearer(auto_error=False, description="The server's token (serve --token-file)")
router = APIRouter(
    route_class=GatedRoute, tags=["OpenAI-compatible"], dependencies=[Depends(bearer)]
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
        f"model {shown(name)} is not on this server; it has {card.id!r} (also answers to "
        f"{', '.join(ALIASES)})",
        param="model", code="model_not_found",
    )  # fmt: skip


@router.get(
    MODELS, summary="The models this server has", response_model=ModelList,
    responses=error_docs(401),
)  # fmt: skip
def list_models(request: Request) -> ModelList:
    return ModelList(data=[model_card(server_of(request))])


@router.get(
    MODELS + "/{model_id}", summary="One model", response_model=ModelCard,
    responses=error_docs(401, 404),
)  # fmt: skip
def get_model(request: Request, model_id: str) -> ModelCard:
    card = model_card(server_of(request))
    if model_id != card.id and model_id not in ALIASES:
        raise ApiError(404, f"no model {shown(model_id)}; this server has {card.id!r}",
                       param="model", code="model_not_found")  # fmt: skip
    return card


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
        raise ApiError(400, f"language {shown(language)}: this server's model transcribes "
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
            yield _sse(failure(error).body())
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
    **error_docs(400, 401, 413, 415, 429, 500, 503),
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
    server = server_of(request)
    card = _model_named(server, model)
    language_code = _check_language(card, language)
    headers = _notes(card, prompt)
    upload, task, duration_s = await start(request, file)
    if stream:
        return EventSourceResponse(_events(upload, task), headers={**SSE_HEADERS, **headers},
                                   sep="\n", send_timeout=30)  # fmt: skip
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        raise
    except BaseException as exc:  # noqa: BLE001 - said to the client in OpenAI's shape
        raise failure(exc) from None
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
