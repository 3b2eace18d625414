"""The server's own HTTP routes against their OpenAPI schema, as schemathesis reads it.

A CI-sized run over every operation beside the OpenAI ones (tests/test_serve_openai_rest.py
runs /v1/ with its token and uploads): health, readiness, metrics, the rooms' transcripts
and feeds. Each must answer what the schema says, never a 500, for generated input of
every kind (room names, formats, query strings, headers).
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
        assert http_get(server.http + "/docs")[0] == 200
        done = subprocess.run(
            [sys.executable, "-c", "from schemathesis.cli import schemathesis; schemathesis()",
             "run", server.http + "/openapi.json", "--exclude-path-regex", "^/v1/",
             "--checks", "all", "--exclude-checks", "positive_data_acceptance",
             "--max-examples", "10", "--request-timeout", "10", "--seed", "1",
             "--generation-database", "none", "--no-color"],
            cwd=tmp_path, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout.split("SUMMARY")[-1]
