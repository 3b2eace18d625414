"""The parsers inside a real server, attacked through it: the HTTP API against its own
OpenAPI schema (schemathesis, with the token, without it and with a wrong one), and
generated hostile Wyoming streams, Realtime messages and multipart bodies.

The server (127.0.0.1, a token for the API and the rooms, Wyoming on a second port) must
answer every request within its schema, never a 500, and keep answering other clients: a
WebSocket session and /healthz run beside the attack and must get what they get alone.
"""

from __future__ import annotations

import io
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from fuzz_inputs import BROKEN_JSON, JSON_VALUES, accepted, assert_clear, json_text
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import positive_data_acceptance
from serve_fixture import ServerProcess, clip, comparable, pcm, serve
from test_fuzz_protocols import EVENTS, wyoming_streams
from test_serve_wyoming import wyoming_port
from websockets.sync.client import connect
from wyoming.event import read_event

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WRONG = {"Authorization": "Bearer not-the-token"}
#: Examples per operation and generation mode: a tenth of the profile's (ci: 10; long: 500).
EXAMPLES = max(3, settings().max_examples // 10)
RELAXED = settings(max_examples=EXAMPLES, suppress_health_check=list(HealthCheck))
READ_S = 60.0  # what a request may take on a loaded machine before it counts as stalled
PAUSE_S = 1.0  # between the bystander's sessions: beside the attack, not a load of its own


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    token_file = tmp_path_factory.mktemp("token") / "token"
    token_file.write_text(TOKEN + "\n")
    # --max-batch 1: the bystander session's text must not depend on what is batched with it
    with serve("--token-file", str(token_file), "--view-token-file", str(token_file),
               "--wyoming", "tcp://127.0.0.1:0", "--max-batch", "1", "--max-upload-mb", "1",
               "--max-frame-bytes", "65536") as running:  # fmt: skip
        yield running


# -- the bystander: another client while the attack runs ----------------------------------


def ws_session(server: ServerProcess) -> list[dict[str, Any]]:
    """One short utterance over /ws (a clip at full speed), to its summary."""
    data, rate = pcm(clip(0))
    with connect(server.url, additional_headers=AUTH, open_timeout=READ_S) as ws:
        ws.send(json.dumps({"sample_rate": rate, "format": "s16le", "source": "bystander"}))
        for start in range(0, len(data), 3200):
            ws.send(data[start : start + 3200])
        ws.send(json.dumps({"type": "end"}))
        events = []
        while not events or events[-1]["type"] != "summary":
            events.append(json.loads(ws.recv(timeout=READ_S)))
        return events


@contextmanager
def bystander(server: ServerProcess) -> Iterator[dict[str, list[Any]]]:
    """/healthz and /ws sessions in a loop on another thread until the block ends; what
    each got is in the dict yielded (an exception is what it got, too)."""
    seen: dict[str, list[Any]] = {"healthz": [], "sessions": []}
    done = threading.Event()

    def run() -> None:
        # one client, and only the status kept: each httpx.get builds a client whose SSL
        # context its response keeps (~0.8 MB each; a long run's thousands held 4.8 GB)
        with httpx.Client(timeout=READ_S) as client:
            while not done.is_set():
                try:
                    seen["healthz"].append(client.get(server.http + "/healthz").status_code)
                    seen["sessions"].append(ws_session(server))
                except Exception as exc:  # noqa: BLE001 - reported by the test
                    seen["sessions"].append(exc)
                done.wait(PAUSE_S)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join(2 * READ_S)


def check_bystander(seen: dict[str, list[Any]], alone: list[dict[str, Any]]) -> None:
    assert seen["sessions"] and seen["healthz"]
    assert set(seen["healthz"]) == {200}
    for events in seen["sessions"]:
        assert not isinstance(events, Exception), repr(events)
        assert comparable(events) == comparable(alone)


# -- the schema -----------------------------------------------------------------------------


def secured(operation: Any) -> bool:
    return bool(operation.definition.raw.get("security"))


def check_case(case: Any, session: Any) -> None:
    """With the token: what the schema says, never a 500. Without it, or with a wrong one:
    refused (401, in the schema) wherever the operation needs it, unless the request was
    refused for something else first (a room name that cannot be one: 400)."""
    # copies: schemathesis adds its own headers to the dict it is given
    response = case.call(headers=dict(AUTH), session=session, timeout=READ_S)
    case.validate_response(response, excluded_checks=[positive_data_acceptance])
    event(f"{response.status_code} with the token")
    if not secured(case.operation):
        return
    for headers in ({}, WRONG):
        bare = case.call(headers=dict(headers), session=session, timeout=READ_S)
        assert bare.status_code == 401 or (bare.status_code == 400 == response.status_code), (
            f"{case.operation.label} without the right token: {bare.status_code}"
        )
        case.validate_response(bare, excluded_checks=[positive_data_acceptance])


def test_the_api_holds_to_its_schema_with_and_without_the_token(server: ServerProcess) -> None:
    alone = ws_session(server)
    schema = schemathesis.openapi.from_url(server.http + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label for op in operations} >= {
        "GET /healthz", "GET /rooms/{name}/events", "GET /v1/models",
        "POST /v1/audio/transcriptions",
    }  # fmt: skip
    assert all(secured(op) for op in operations if op.path.startswith(("/v1/", "/rooms/")))
    with bystander(server) as seen, requests.Session() as session:
        for operation in operations:
            for mode in schemathesis.GenerationMode:

                @RELAXED
                @given(case=operation.as_strategy(generation_mode=mode))
                def attack(case: Any) -> None:
                    check_case(case, session)

                try:
                    attack()
                except Unsatisfiable:  # nothing in the request can be invalid (/healthz)
                    assert mode == schemathesis.GenerationMode.NEGATIVE
    check_bystander(seen, alone)


# -- Wyoming, Realtime and multipart through the server -------------------------------------


@RELAXED
@given(stream=wyoming_streams())
def test_hostile_wyoming_streams_end_only_their_own_connection(
    server: ServerProcess, stream: bytes
) -> None:
    """The server answers what it can read, then at most one error event, and closes."""
    port = wyoming_port(server)
    with socket.create_connection(("127.0.0.1", port), timeout=READ_S) as conn:
        conn.sendall(stream)
        conn.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    answers, replies = [], io.BytesIO(received)
    while (event := read_event(replies)) is not None:  # wyoming's own reader
        answers.append(event)
    errors = [event for event in answers if event.type == "error"]
    assert errors == answers[-1:] or not errors  # at most one, and the last
    for error in errors:
        assert_clear(error.data["text"])
    if not errors:
        accepted()
    assert describe(port)["type"] == "info"  # and the next client is served


def describe(port: int) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=READ_S) as conn:
        conn.sendall(b'{"type": "describe"}\n')
        line = conn.makefile("rb").readline()
    return dict(json.loads(line))


#: Within the server's --max-frame-bytes (a larger message closes its connection, 1009:
#: tests/test_serve_openai_realtime.py)
FRAMED_EVENTS = EVENTS.map(lambda message: message[:60_000])


@RELAXED
@given(messages=st.lists(FRAMED_EVENTS, min_size=1, max_size=5))
def test_hostile_realtime_messages_get_error_events_and_the_session_goes_on(
    server: ServerProcess, messages: list[str | bytes]
) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/realtime?intent=transcription"
    with connect(url, additional_headers=AUTH, open_timeout=READ_S) as ws:
        assert json.loads(ws.recv(timeout=READ_S))["type"] == "session.created"
        for message in messages:
            ws.send(message)
        ws.send(json.dumps({"type": "session.update", "event_id": "last",
                            "session": {"type": "transcription"}}))  # fmt: skip
        while True:  # every message before it was answered or taken; this one is answered
            event = json.loads(ws.recv(timeout=READ_S))
            if event["type"] == "error":
                assert_clear(event["error"]["message"])
                assert event["error"]["code"]
            if event["type"] == "session.updated" or event.get("error", {}).get("event_id"):
                break


MULTIPART_FIELDS = st.dictionaries(
    st.sampled_from(["model", "language", "prompt", "response_format", "temperature",
                     "timestamp_granularities[]", "stream", "x"]) | st.text(max_size=8),
    st.sampled_from(["tiny-en", "whisper-1", "en", "json", "srt", "verbose_json", "word",
                     "true", "nan", "1e400", ""]) | st.text(max_size=12),
    max_size=4,
)  # fmt: skip


@RELAXED
@given(fields=MULTIPART_FIELDS, name=st.text(max_size=40),
       data=st.binary(max_size=64) | st.just(b"RIFF") | BROKEN_JSON.map(str.encode),
       raw=st.none() | st.binary(max_size=200) | JSON_VALUES.map(json_text).map(str.encode))
def test_hostile_uploads_get_one_openai_error_each(
    server: ServerProcess, fields: dict[str, str], name: str, data: bytes, raw: bytes | None
) -> None:
    """Form fields and file names of any kind, or a body that is no multipart at all (with
    the multipart content type): an error in OpenAI's shape, never a 500."""
    url = server.http + "/v1/audio/transcriptions"
    if raw is None:
        response = httpx.post(url, headers=AUTH, data=fields, files={"file": (name, data)},
                              timeout=READ_S)  # fmt: skip
    else:
        headers = {**AUTH, "Content-Type": "multipart/form-data; boundary=x"}
        response = httpx.post(url, headers=headers, content=raw, timeout=READ_S)
    assert response.status_code in (400, 413, 415), response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert_clear(error["message"])


def test_the_served_parsers_leave_the_server_answering(server: ServerProcess) -> None:
    """After every attack above, a session gets what it got before them."""
    assert httpx.get(server.http + "/readyz", timeout=READ_S).status_code == 200
    events = ws_session(server)
    assert events[-1]["type"] == "summary" and events[-1]["text"]

