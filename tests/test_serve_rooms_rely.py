"""What a speaker and a reader of a room can rely on, in headless chromium and over the
protocol: a reader's page follows a new talk after the server restarts, without a reload;
an unknown room says to check the link.
"""

from __future__ import annotations

from typing import Any

from room_browser import ROOM, WAIT_S, Proxy, publish_clip, shown, status_text, viewers
from serve_fixture import clip, file_events, serve

__all__ = ["viewers"]  # the fixture, for pytest

#: what a session sends to be decoded with `streamasr file`'s defaults
FILE_SETTINGS = {"block_ms": "chunk", "tail_padding_s": 0.66}


def test_reader_page_follows_the_next_talk_after_a_server_restart(viewers: Any) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    clips = [clip(index) for index in range(4)]
    expected = file_events(*clips)
    finals = [r["text"] for path in clips for r in expected[path] if r["type"] == "final"]
    wait = WebDriverWait(viewers, WAIT_S)
    with serve() as first:
        proxy = Proxy(first.port)
        try:
            for path in clips[:3]:  # a long first talk: its room_seq runs far
                publish_clip(first.url, path, **FILE_SETTINGS)
            viewers.get(f"http://127.0.0.1:{proxy.port}/rooms/{ROOM}")
            wait.until(lambda d: shown(d) == finals[:3])
            assert first.stop() == 0
            wait.until(lambda d: "cannot be reached" in status_text(d))
            with serve() as second:  # the server again (the same address to the page)
                proxy.target = second.port
                wait.until(lambda d: "no such room yet" in status_text(d).lower())
                publish_clip(second.url, clips[3], **FILE_SETTINGS)
                wait.until(lambda d: shown(d) == finals[3:4])
                wait.until(lambda d: "not connected" in status_text(d))
        finally:
            proxy.close()
