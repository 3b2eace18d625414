"""The server's own HTTP routes against their OpenAPI schema, as schemathesis reads it.

A CI-sized run over every operation of a server without tokens (tests/test_fuzz_served.py
runs one with its tokens, with and without them; tests/test_serve_openai_rest.py runs /v1/
with uploads of real audio): health, readiness, metrics, the rooms' transcripts and feeds,
the OpenAI routes. Each must answer what the schema says, never a 500, for generated input
of every kind (room names, formats, `after`, query strings, headers), and the schema must
not claim a token this server does not ask for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from serve_fixture import http_get, serve


def test_the_schema_is_served_and_holds_for_generated_requests(tmp_path: Path) -> None:
    with serve() as server:
        status, body = http_get(server.http + "/openapi.json")
        assert status == 200
        schema = json.loads(body)
        paths = set(schema["paths"])
        assert {"/healthz", "/readyz", "/metrics", "/rooms/{name}/events",
                "/v1/audio/transcriptions", "/v1/models"} <= paths  # fmt: skip
        assert not any(path.startswith("/ws") for path in paths)  # WebSocket: not HTTP
        operations = [op for ops in schema["paths"].values() for op in ops.values()]
        assert not any("security" in operation for operation in operations)  # no token set
        feed = schema["paths"]["/rooms/{name}/events"]["get"]
        assert {p["name"] for p in feed["parameters"]} >= {"after", "Last-Event-ID"}
        assert http_get(server.http + "/docs")[0] == 200
        done = subprocess.run(
            [sys.executable, "-c", "from schemathesis.cli import schemathesis; schemathesis()",
             "run", server.http + "/openapi.json", "--checks", "all",
             "--exclude-checks", "positive_data_acceptance",
             "--max-examples", "10", "--request-timeout", "10", "--seed", "1",
             "--generation-database", "none", "--no-color"],
            cwd=tmp_path, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout.split("SUMMARY")[-1]
