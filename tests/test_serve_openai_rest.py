"""The OpenAI-compatible REST API of `streamasr serve`, driven by real clients.

A real server process, the official `openai` package (every response_format, streaming,
models), curl as docs/serve.md shows it, and schemathesis against /openapi.json. Every
transcript must be what `streamasr file` prints for the same audio with the server's
settings (--block-ms 100 --tail-padding 0.3); each hostile request gets one clear error in
OpenAI's shape, and a live WebSocket session beside them is undisturbed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from serve_fixture import (
    REPO,
    ServerProcess,
    clip,
    comparable,
    file_events,
    pcm,
    read_until_summary,
    serve,
)
from websockets.asyncio.client import connect

TOKEN = "rest-test-token"
LIVE = ("--block-ms", "100", "--tail-padding", "0.3")
MAX_CONNECTIONS = 6
MAX_UPLOAD_MB = 4
GAP_S = 2.0  # silence between clips: the endpoint rules end an utterance in each gap


@pytest.fixture(scope="module")
def audio(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Four bundled clips in one WAV with gaps (several finals), and the same as stereo
    FLAC (another format and channel count)."""
    folder = tmp_path_factory.mktemp("audio")
    parts = []
    for index in range(4):
        samples, rate = sf.read(REPO / clip(index), dtype="float32")
        parts += [samples, np.zeros(int(GAP_S * rate), np.float32)]
    joined = np.concatenate(parts)
    wav, flac = folder / "four.wav", folder / "four-stereo.flac"
    sf.write(wav, joined, rate, subtype="PCM_16")
    sf.write(flac, np.stack([joined, joined], axis=1), rate, subtype="PCM_16")
    return {"wav": str(wav), "flac": str(flac), "clip": clip(0)}


@pytest.fixture(scope="module")
def reference(audio: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """`streamasr file --format jsonl` with the server's live defaults."""
    return file_events(*audio.values(), options=LIVE)


def file_prints(path: str, fmt: str) -> str:
    """What `streamasr file PATH --format FMT` prints with the server's defaults."""
    done = subprocess.run(
        [sys.executable, "-m", "streamasr", "file", path, "--model", "tiny-en", "--format",
         fmt, *LIVE],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def finals(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == "final" and r["text"].strip()]


def joined(records: list[dict[str, Any]]) -> str:
    return " ".join(r["text"].strip() for r in finals(records))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    token_file = tmp_path_factory.mktemp("token") / "token"
    token_file.write_text(TOKEN + "\n")
    # --max-batch 1: texts are compared with `streamasr file`'s, and the bundled model is
    # int8, whose output depends on the streams batched with it (docs/performance.md)
    with serve(
        "--max-batch", "1", "--max-connections", str(MAX_CONNECTIONS), "--token-file",
        str(token_file), "--max-upload-mb", str(MAX_UPLOAD_MB),
    ) as running:  # fmt: skip
        yield running


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http + "/v1", api_key=TOKEN, max_retries=0, timeout=120)


def transcribe(client: openai.OpenAI, path: str, **options: Any) -> Any:
    with open(REPO / path, "rb") as audio_file:
        options = {"model": "tiny-en", **options}
        return client.audio.transcriptions.create(file=audio_file, **options)


# -- every response format equals `streamasr file` --------------------------------------------


def test_json_and_text_equal_file_command(
    client: openai.OpenAI, audio: dict[str, str], reference: dict[str, list[dict[str, Any]]]
) -> None:
    expected = joined(reference[audio["wav"]])
    assert len(finals(reference[audio["wav"]])) > 1  # the gaps made several utterances
    result = transcribe(client, audio["wav"])
    assert result.text == expected
    assert result.usage.seconds == pytest.approx(sf.info(audio["wav"]).duration, abs=1e-3)
    text = transcribe(client, audio["wav"], response_format="text")
    assert text == file_prints(audio["wav"], "text")


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_subtitles_equal_file_command(
    client: openai.OpenAI, audio: dict[str, str], fmt: str
) -> None:
    expected = file_prints(audio["wav"], fmt)
    if fmt == "vtt":  # `file` names its input in a NOTE; an upload's cues have none
        expected = expected.replace(f"NOTE {Path(audio['wav']).name}\n\n", "")
    assert transcribe(client, audio["wav"], response_format=fmt) == expected
    assert expected.count("-->") >= 4


def test_verbose_json_segments_and_words_are_file_commands(
    client: openai.OpenAI, audio: dict[str, str], reference: dict[str, list[dict[str, Any]]]
) -> None:
    expected = finals(reference[audio["wav"]])
    both = transcribe(client, audio["wav"], response_format="verbose_json",
                      timestamp_granularities=["word", "segment"])  # fmt: skip
    assert both.text == joined(reference[audio["wav"]])
    assert both.duration == pytest.approx(sf.info(audio["wav"]).duration, abs=1e-3)
    segments = [(s.text, s.start, s.end) for s in both.segments]
    assert segments == [
        (f["text"], round(f["start_s"], 3), round(f["end_s"], 3)) for f in expected
    ]
    words = [(w.word, w.start, w.end) for w in both.words]
    assert words == [
        (w["text"], round(w["start_s"], 3), round(w["end_s"], 3))
        for f in expected for w in f["words"]
    ]  # fmt: skip
    segments_only = transcribe(client, audio["wav"], response_format="verbose_json")
    assert segments_only.words is None and len(segments_only.segments) == len(expected)


def test_stream_gives_a_delta_per_final_then_the_text(
    client: openai.OpenAI, audio: dict[str, str], reference: dict[str, list[dict[str, Any]]]
) -> None:
    events = list(transcribe(client, audio["wav"], stream=True))
    deltas = [e for e in events if e.type == "transcript.text.delta"]
    assert [e.type for e in events[-1:]] == ["transcript.text.done"]
    assert len(deltas) == len(finals(reference[audio["wav"]]))
    assert "".join(e.delta for e in deltas) == events[-1].text == joined(reference[audio["wav"]])


def test_stereo_flac_equals_file_command(
    client: openai.OpenAI, audio: dict[str, str], reference: dict[str, list[dict[str, Any]]]
) -> None:
    assert transcribe(client, audio["flac"]).text == joined(reference[audio["flac"]])


def test_models_list_and_retrieve(client: openai.OpenAI, server: ServerProcess) -> None:
    models = client.models.list().data
    assert [m.id for m in models] == ["tiny-en"]
    card = models[0].model_dump()
    assert card["engine"] == "sherpa-onnx" and card["object"] == "model"
    assert card["streaming"]["block_ms"] == 100.0
    assert card["streaming"]["tail_padding_s"] == 0.3
    assert client.models.retrieve("tiny-en").id == "tiny-en"
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("whisper-large")
    assert caught.value.body["code"] == "model_not_found"  # type: ignore[index]


def test_openai_model_names_are_aliases_and_prompt_is_said_ignored(
    client: openai.OpenAI, audio: dict[str, str], reference: dict[str, list[dict[str, Any]]]
) -> None:
    with open(REPO / audio["clip"], "rb") as audio_file:
        raw = client.audio.transcriptions.with_raw_response.create(
            file=audio_file, model="whisper-1", prompt="CAR"
        )
    assert raw.parse().text == joined(reference[audio["clip"]])
    assert raw.headers["x-streamasr-model"] == "tiny-en"
    assert raw.headers["x-streamasr-ignored"].startswith("prompt")
    with pytest.raises(openai.BadRequestError) as caught:
        transcribe(client, audio["clip"], model="no-such-model")
    assert "tiny-en" in caught.value.message


def test_curl_as_the_docs_show_it(server: ServerProcess, reference: dict[str, list[dict[str, Any]]],
                                  audio: dict[str, str]) -> None:  # fmt: skip
    url = server.http + "/v1/audio/transcriptions"
    common = ["curl", "-sS", "--fail-with-body", url, "-H", f"Authorization: Bearer {TOKEN}",
              "-F", f"file=@{audio['clip']}", "-F", "model=tiny-en"]  # fmt: skip
    body = subprocess.run(common, cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert json.loads(body)["text"] == joined(reference[audio["clip"]])
    text = subprocess.run([*common, "-F", "response_format=text"], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert text == file_prints(audio["clip"], "text")


# -- hostile input: one clear error each -------------------------------------------------------


def post(server: ServerProcess, token: str | None = TOKEN, **request: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(server.http + "/v1/audio/transcriptions", headers=headers, timeout=60,
                      **request)  # fmt: skip


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


#: The multipart head of a raw upload's one part (the audio follows it).
PART_HEAD = (b'--xx\r\nContent-Disposition: form-data; name="file"; filename="big.wav"\r\n'
             b"Content-Type: audio/wav\r\n\r\n")  # fmt: skip


def upload_request(chunked: bool, total: int) -> bytes:
    """A raw upload's request line and headers, its body `total` bytes or chunked."""
    length = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % total
    return (
        b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
        b"Content-Type: multipart/form-data; boundary=xx\r\n" + length + b"\r\n\r\n"
    )


def read_answer(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    """The answer, read as it arrives up to its Content-Length, as a client does that
    stops sending once it has it: (status, error)."""
    answer = b""
    while True:
        head, found, payload = answer.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length: *(\d+)", head)
        if found and length and len(payload) >= int(length.group(1)):
            return int(head.split()[1]), json.loads(payload)["error"]
        chunk = sock.recv(1 << 16)
        assert chunk, f"closed before the whole answer: {answer!r}"
        answer += chunk


def huge_upload(server: ServerProcess, chunked: bool) -> tuple[int, dict[str, Any], int]:
    """A 2 GB upload from a generator, on a raw socket that reads the answer while it
    sends (an HTTP library sends the whole body first) and stops sending once it has the
    answer: (status, error, bytes sent)."""
    total = 2_000_000_000
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    sent = [0]

    def body() -> Iterator[bytes]:
        yield PART_HEAD
        zeros = bytes(1 << 16)
        while sent[0] < total:
            yield zeros

    def send() -> None:
        try:
            sock.sendall(upload_request(chunked, total))
            for part in body():
                sock.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
                sent[0] += len(part)
        except OSError:
            pass  # the answer is in: this side was shut down (or the server closed)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    with sock:
        status, error = read_answer(sock)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sender.join(30)
    return status, error, sent[0]


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
def test_a_2_gb_upload_is_refused_early(server: ServerProcess, chunked: bool) -> None:
    status, error, sent = huge_upload(server, chunked)
    assert status == 413
    assert error["code"] == "file_too_large" and "--max-upload-mb" in error["message"]
    assert sent < 200 * 1_000_000  # refused near the limit, not after 2 GB


def test_a_refused_upload_is_read_on_after_its_answer(server: ServerProcess) -> None:
    """After the 413 the server reads the rest of the upload for a while before it closes
    (a lingering close): closed with bytes unread, its kernel would reset the connection,
    and a client still sending could lose the answer. Bytes sent after the answer are not
    reset; the connection closes cleanly when the client stops."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(upload_request(False, 2_000_000_000) + PART_HEAD + bytes(1 << 16))
        status, error = read_answer(sock)
        time.sleep(0.3)  # closed at its answer, the server would reset what comes now
        sock.sendall(bytes(1 << 20))
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1 << 16) == b""  # a clean close, not a reset
    assert status == 413 and error["code"] == "file_too_large"


def test_a_multipart_with_no_file(server: ServerProcess) -> None:
    response = post(server, files={"model": (None, "tiny-en")})
    assert response.status_code == 400
    error = error_of(response)
    assert error["param"] == "file" and "-F file=@" in error["message"]


def test_wrong_content_type(server: ServerProcess) -> None:
    response = post(server, json={"file": "speech.wav", "model": "tiny-en"})
    assert response.status_code == 415
    assert "multipart/form-data" in error_of(response)["message"]


def test_garbage_bytes_as_file(client: openai.OpenAI) -> None:
    garbage = np.random.default_rng(7).bytes(50_000)
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.transcriptions.create(file=("speech.wav", garbage), model="tiny-en")
    body: dict[str, Any] = caught.value.body  # type: ignore[assignment]
    assert body["code"] == "invalid_audio" and body["param"] == "file"
    assert "speech.wav" in body["message"] and "streamasr-upload" not in body["message"]


def test_a_bad_response_format(server: ServerProcess, audio: dict[str, str]) -> None:
    data = Path(REPO / audio["clip"]).read_bytes()
    response = post(server, files={"file": ("a.wav", data)}, data={"response_format": "xml"})
    assert response.status_code == 400
    error = error_of(response)
    assert error["param"] == "response_format" and "verbose_json" in error["message"]


def test_token_missing_wrong_or_as_x_api_key(server: ServerProcess) -> None:
    models = server.http + "/v1/models"
    assert httpx.get(models).status_code == 401
    wrong = httpx.get(models, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and error_of(wrong)["code"] == "invalid_api_key"
    assert httpx.get(models, headers={"X-API-Key": TOKEN}).status_code == 200
    # refused before its body is read
    assert post(server, token=None, content=b"x" * 1000).status_code == 401


def test_unknown_path_and_method_in_openai_shape(server: ServerProcess) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    wrong_method = httpx.get(server.http + "/v1/audio/transcriptions", headers=headers)
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert error_of(wrong_method)["code"] == "method_not_allowed"
    missing = httpx.post(server.http + "/v1/audio/translations", headers=headers)
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"


def test_full_server_answers_429(server: ServerProcess, client: openai.OpenAI,
                                 audio: dict[str, str]) -> None:  # fmt: skip
    async def run() -> None:
        holders = [await connect(server.url, additional_headers={"Authorization":
                                                                 f"Bearer {TOKEN}"})
                   for _ in range(MAX_CONNECTIONS)]  # fmt: skip
        try:
            with pytest.raises(openai.RateLimitError) as caught:
                await asyncio.to_thread(transcribe, client, audio["clip"])
            assert caught.value.response.headers["retry-after"] == "1"
        finally:
            for holder in holders:
                await holder.close()

    asyncio.run(run())


def test_live_session_undisturbed_by_hostile_uploads(
    server: ServerProcess, client: openai.OpenAI, audio: dict[str, str],
    reference: dict[str, list[dict[str, Any]]],
) -> None:  # fmt: skip
    """A live WebSocket session (100 ms messages at 5x real time) while every hostile
    request above comes in: its events are still `streamasr file`'s."""
    data, rate = pcm(audio["clip"])

    async def live() -> list[dict[str, Any]]:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with connect(server.url, additional_headers=headers) as ws:
            await ws.send(json.dumps({"sample_rate": rate, "format": "s16le",
                                      "source": audio["clip"]}))  # fmt: skip
            for start in range(0, len(data), 3200):
                await ws.send(data[start : start + 3200])
                await asyncio.sleep(0.02)
            await ws.send(json.dumps({"type": "end"}))
            return await read_until_summary(ws)

    def hostile() -> None:
        test_a_2_gb_upload_is_refused_early(server, chunked=True)
        test_a_multipart_with_no_file(server)
        test_wrong_content_type(server)
        test_garbage_bytes_as_file(client)
        test_a_bad_response_format(server, audio)

    async def run() -> list[dict[str, Any]]:
        events, _ = await asyncio.gather(live(), asyncio.to_thread(hostile))
        return events

    assert comparable(asyncio.run(run())) == comparable(reference[audio["clip"]])


# -- the schema --------------------------------------------------------------------------------


def test_schemathesis_finds_no_500_and_no_schema_violation(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A CI-sized run over the /v1 operations. Not checked: that schema-valid input is
    accepted (random bytes are a valid `file` by the schema, but no audio)."""
    done = subprocess.run(
        [sys.executable, "-c", "from schemathesis.cli import schemathesis; schemathesis()",
         "run", server.http + "/openapi.json", "--include-path-regex", "^/v1/",
         "--checks", "all", "--exclude-checks", "positive_data_acceptance",
         "--max-examples", "5", "--header", f"Authorization: Bearer {TOKEN}",
         "--request-timeout", "30", "--seed", "1", "--generation-database", "none",
         "--no-color"],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_a_bad_upload_limit_is_a_usage_error() -> None:
    from typer.testing import CliRunner

    from streamasr.cli import app

    result = CliRunner().invoke(app, ["serve", "--model", "tiny-en", "--max-upload-mb", "0"])
    assert result.exit_code == 2, result.output
    assert "--max-upload-mb 0" in result.output
