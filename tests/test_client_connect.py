"""The first mistakes with `file --server` against a real `streamasr serve`, each one line that
names the fix: the scheme (ws:// or wss://), a self-signed certificate (SSL_CERT_FILE), the
token (STREAMASR_TOKEN), the path (/ws)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from serve_fixture import self_signed, serve

REPO = Path(__file__).resolve().parent.parent
CLIP = REPO / "models" / "tiny-en" / "test_wavs" / "4.wav"


def file_on(url: str, **env: str) -> str:
    """The one error line of `file CLIP --server URL`."""
    done = subprocess.run(
        [sys.executable, "-m", "streamasr", "file", str(CLIP), "--server", url],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**{k: v for k, v in os.environ.items() if k != "STREAMASR_TOKEN"},
             "PYTHONPATH": str(REPO), **env},
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_a_plain_server_reached_with_wss_or_a_wrong_path() -> None:
    with serve() as server:
        assert "use ws:// instead of wss://" in file_on(server.url.replace("ws:", "wss:"))
        assert "the path is /ws" in file_on(server.url.replace("/ws", "/socket"))


def test_a_tls_server_reached_with_ws_untrusted_or_without_its_token(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    args = ("--certfile", str(cert), "--keyfile", str(key))
    with serve(*args, env={"STREAMASR_TOKEN": "secret"}) as server:
        wss = server.url.replace("ws:", "wss:")
        assert "use wss:// instead of ws://" in file_on(server.url)
        assert "SSL_CERT_FILE=CERT.pem" in file_on(wss)
        assert "set STREAMASR_TOKEN" in file_on(wss, SSL_CERT_FILE=str(cert))
        assert "check $STREAMASR_TOKEN" in file_on(wss, SSL_CERT_FILE=str(cert),
                                                   STREAMASR_TOKEN="wrong")  # fmt: skip
