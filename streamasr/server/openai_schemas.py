"""The OpenAI REST API's documents: its response shapes and its error object.

Kept apart from the routes so that what a client receives (and what /openapi.json says it
receives) is read in one place, without the HTTP handling around it. Every error under /v1
is `ApiError`'s body, OpenAI's `{"error": {message, type, param, code}}`.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

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


def error_docs(*statuses: int) -> dict[int | str, dict[str, Any]]:
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


def validation_error(exc: RequestValidationError) -> ApiError:
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
