"""`serve --host 0.0.0.0` prints pages a person can open (the machine's own addresses, each
one fetched here) and one warning line when other machines can reach an unguarded port;
on 127.0.0.1 it says neither. Each server is a real `streamasr serve` process.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from serve_fixture import MODEL, REPO, START_LIMIT_S, http_get, serve

from streamasr.server.reach import Exposure, exposure_warning, openable


def started(*args: str) -> tuple[list[str], list[str]]:
    """Start `streamasr serve ARGS`, wait for its startup lines (up to the warning, or the
    page's first answer), stop it; its stderr lines and the pages it said to open."""
    process = subprocess.Popen(
        [sys.executable, "-m", "streamasr", "serve", "--model", MODEL, "--port", "0", *args],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    lines: list[str] = []
    warned = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith("warning:"):
                warned.set()
        warned.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert warned.wait(START_LIMIT_S), "no warning:\n" + "\n".join(lines)
        pages = [url for line in lines if line.startswith("streamasr serve: open ")
                 for url in re.findall(r"https?://\S+/", line)]
        for url in pages:  # each address said is one a person can open
            status, body = http_get(url)
            assert status == 200 and "<html" in body.lower(), url
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        reader.join(10)
    return lines, pages


def test_every_interface_without_a_token_warns_and_shows_openable_pages() -> None:
    lines, pages = started("--host", "0.0.0.0")
    warnings = [line for line in lines if line.startswith("warning:")]
    assert len(warnings) == 1, lines
    assert "no token and no TLS" in warnings[0]
    assert "--token-file" in warnings[0] and "--certfile" in warnings[0]
    assert pages and pages[-1].startswith("http://127.0.0.1:")
    assert not any("0.0.0.0" in url for url in pages)
    assert "Traceback" not in "\n".join(lines)


def test_a_token_without_tls_warns_of_clear_text_only(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    lines, _ = started("--host", "0.0.0.0", "--token-file", str(token))
    warnings = [line for line in lines if line.startswith("warning:")]
    assert len(warnings) == 1, lines
    assert "without TLS" in warnings[0] and "--certfile" in warnings[0]
    assert "--token-file" not in warnings[0]


def test_loopback_says_neither() -> None:
    with serve() as server:
        assert http_get(server.http + "/")[0] == 200  # the startup lines are all out by now
        server.stop()
    said = "".join(server.stderr_lines)
    assert "warning:" not in said and "serve: open" not in said


@pytest.mark.parametrize(
    ("bound", "token", "tls", "says"),
    [
        ([("0.0.0.0", 1)], False, False, "0.0.0.0:1 is reachable from other machines with no "
         "token and no TLS"),
        ([("0.0.0.0", 1), ("::", 2)], True, False, "0.0.0.0:1 and [::]:2 are reachable from "
         "other machines without TLS"),
        ([("10.1.2.3", 1)], False, True, "10.1.2.3:1 is reachable from other machines with no "
         "token: anyone who reaches it can stream audio to it; add --token-file"),
        ([("0.0.0.0", 1)], True, True, None),
        ([("127.0.0.1", 1), ("::1", 1)], False, False, None),
    ],
)
def test_the_warning_names_what_is_missing(
    bound: list[tuple[str, int]], token: bool, tls: bool, says: str | None
) -> None:
    warning = exposure_warning(bound, Exposure(token=token, tls=tls))
    if says is None:
        assert warning is None
    else:
        assert warning is not None and warning.startswith(says) and "\n" not in warning


def test_openable_addresses_are_the_machines_own() -> None:
    every = openable("0.0.0.0")
    assert every[-1] == "127.0.0.1" and "0.0.0.0" not in every
    assert openable("10.1.2.3") == ["10.1.2.3"]
    assert openable("localhost") == ["localhost"]
    assert "::" not in openable("::") and openable("::")[-1] == "::1"
