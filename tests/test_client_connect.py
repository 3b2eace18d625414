"""The first mistakes with `file --server` against a real `streamasr serve`, each one line that
names the fix: the scheme (ws:// or wss://), a self-signed certificate (--cafile or
SSL_CERT_FILE), the token (STREAMASR_TOKEN), the path (/ws); and a --cafile that cannot be
one (missing, a folder, a key, empty) said before anything connects."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from serve_fixture import self_signed, serve

REPO = Path(__file__).resolve().parent.parent
CLIP = REPO / "models" / "tiny-en" / "test_wavs" / "4.wav"


def file_on(url: str, *args: str, code: int = 1, audio: Path = CLIP, **env: str) -> str:
    """The one error line of `file AUDIO --server URL ARGS`, which exits `code`."""
    done = run_file(url, *args, audio=audio, **env)
    assert done.returncode == code and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def run_file(
    url: str, *args: str, audio: Path = CLIP, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamasr", "file", str(audio), "--server", url, "-f", "text",
         *args],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**{k: v for k, v in os.environ.items() if k not in ("STREAMASR_TOKEN",
                                                                 "SSL_CERT_FILE")},
             "PYTHONPATH": str(REPO), **env},
    )  # fmt: skip


def test_a_plain_server_reached_with_wss_or_a_wrong_path() -> None:
    with serve() as server:
        assert "use ws:// instead of wss://" in file_on(server.url.replace("ws:", "wss:"))
        assert "the path is /ws" in file_on(server.url.replace("/ws", "/socket"))


def test_a_tls_server_reached_with_ws_untrusted_or_without_its_token(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    other_folder = tmp_path / "other"
    other_folder.mkdir()
    other, _ = self_signed(other_folder)
    args = ("--certfile", str(cert), "--keyfile", str(key))
    with serve(*args, env={"STREAMASR_TOKEN": "secret"}) as server:
        wss = server.url.replace("ws:", "wss:")
        assert "use wss:// instead of ws://" in file_on(server.url)
        assert "trust it: --cafile CERT.pem (or SSL_CERT_FILE=CERT.pem)" in file_on(wss)
        assert "set STREAMASR_TOKEN" in file_on(wss, SSL_CERT_FILE=str(cert))
        assert "set STREAMASR_TOKEN" in file_on(wss, "--cafile", str(cert))
        assert "check $STREAMASR_TOKEN" in file_on(wss, SSL_CERT_FILE=str(cert),
                                                   STREAMASR_TOKEN="wrong")  # fmt: skip
        assert f"not signed by {other}" in file_on(wss, "--cafile", str(other))
        der = tmp_path / "cert.der"  # the same certificate in DER, as some tools write it
        subprocess.run(["openssl", "x509", "-in", str(cert), "-outform", "DER", "-out",
                        str(der)], check=True, capture_output=True)  # fmt: skip
        for trust in (cert, der):
            trusted = run_file(wss, "--cafile", str(trust), STREAMASR_TOKEN="secret")
            assert trusted.returncode == 0, trusted.stderr
            assert trusted.stdout.strip()  # the server's text came back


def test_an_input_that_cannot_be_read_is_said_before_connecting(tmp_path: Path) -> None:
    """The missing file is the mistake to name, not the server nobody has started yet."""
    missing = tmp_path / "nope.wav"
    line = file_on("ws://127.0.0.1:9/ws", audio=missing)  # nothing listens there
    assert str(missing) in line and "listen" not in line, line


def test_a_cafile_that_cannot_be_one_is_one_line_before_connecting(tmp_path: Path) -> None:
    _, key = self_signed(tmp_path)
    empty = tmp_path / "empty.pem"
    empty.write_text("")
    # nothing listens at this URL: each error comes from the file, before any connection
    url = "wss://127.0.0.1:9/ws"
    for cafile, says in [
        (tmp_path / "missing.pem", "does not exist"),
        (tmp_path, "is a folder, not a file"),
        (key, "holds no certificate"),
        (empty, "holds no certificate"),
    ]:
        line = file_on(url, "--cafile", str(cafile), code=2)
        assert f"--cafile {cafile} {says}" in line, line
        assert "give the server's own certificate (serve --certfile) or its CA's" in line
    done = subprocess.run(
        [sys.executable, "-m", "streamasr", "file", str(CLIP), "--cafile", str(key)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 2 and "give --server URL too" in done.stderr, done.stderr
