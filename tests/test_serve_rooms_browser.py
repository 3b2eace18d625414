"""A room in headless Debian chromium through selenium: one page publishes, two read.

The publishing page (the server's page at /?room=NAME) streams chromium's fake microphone
(a bundled clip, looped) and keeps a copy of exactly what it sent; two viewer pages
(/rooms/NAME, one at a phone's size, one at a desktop's) must show the last finals that
`streamasr file` prints for that copy, and the transcript their download link fetches must
hold them all. A viewer page opened before anyone publishes says so, then catches up; when
the server goes away, the page says that too; a viewer page whose network drops out
reconnects and shows the finals spoken meanwhile, each once; a refused token is said.
Screenshots go to build/: room-phone.png, room-desktop.png (dark, larger text); docs/img
holds copies.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from room_browser import (
    DESKTOP,
    ROOM,
    WAIT_S,
    Proxy,
    fetched,
    publisher,
    shown,
    viewers,
)
from serve_fixture import REPO, ServerProcess, clip, file_events, serve

__all__ = ["publisher", "viewers"]  # the fixtures, for pytest


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with serve("--max-connections", "4") as running:
        yield running


def test_two_viewer_pages_show_what_file_prints_for_the_published_audio(
    server: ServerProcess, publisher: Any, viewers: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    # a viewer before the talk: the room is unknown, the page says so and waits
    viewers.get(f"{server.http}/rooms/{ROOM}")
    phone = viewers.current_window_handle
    WebDriverWait(viewers, WAIT_S).until(
        lambda d: "No such room yet, check the link" in d.find_element(By.ID, "status").text
    )
    publisher.get(f"{server.http}/?room={ROOM}")
    publisher.find_element(By.ID, "keep").click()
    publisher.find_element(By.ID, "start").click()
    wait = WebDriverWait(publisher, WAIT_S)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#finals .final")) >= 2)
    # a second viewer in the middle of the talk, at a desktop's size
    viewers.switch_to.new_window("window")
    desktop = viewers.current_window_handle
    viewers.set_window_size(*DESKTOP)
    viewers.get(f"{server.http}/rooms/{ROOM}")
    WebDriverWait(viewers, WAIT_S).until(lambda d: shown(d))
    publisher.find_element(By.ID, "stop").click()
    wait.until(lambda d: d.find_element(By.ID, "copy").is_displayed())
    sent = tmp_path / "sent.wav"
    copy = publisher.find_element(By.ID, "copy").get_attribute("href")
    sent.write_bytes(fetched(publisher, copy))
    live = ("--block-ms", "100", "--tail-padding", "0.3")  # the server's session defaults
    finals = [r["text"] for r in file_events(str(sent), options=live)[str(sent)]
              if r["type"] == "final" and r["text"].strip()]  # fmt: skip
    assert len(finals) >= 2
    (REPO / "build").mkdir(exist_ok=True)
    for handle, name in ((phone, "room-phone.png"), (desktop, "room-desktop.png")):
        viewers.switch_to.window(handle)
        WebDriverWait(viewers, WAIT_S).until(
            lambda d: "not connected" in d.find_element(By.ID, "status").text
        )
        assert shown(viewers) == finals  # every final, the earlier ones scrolled back
        assert viewers.find_elements(By.CSS_SELECTOR, "#captions .partial") == []
        if handle == desktop:  # the dark theme, and larger text
            viewers.find_element(By.ID, "theme").click()
            viewers.find_element(By.ID, "larger").click()
            assert "dark" in viewers.find_element(By.TAG_NAME, "body").get_attribute("class")
        viewers.save_screenshot(str(REPO / "build" / name))
    link = viewers.find_element(By.ID, "get-txt").get_attribute("href")
    assert fetched(viewers, link).decode() == "".join(text + "\n" for text in finals)
    # the server goes away: the page says so, in words, and keeps the captions
    assert server.stop() == 0
    WebDriverWait(viewers, WAIT_S).until(
        lambda d: "server cannot be reached" in d.find_element(By.ID, "status").text
    )
    assert shown(viewers) == finals  # every final, the earlier ones scrolled back


def test_viewer_page_says_when_its_token_is_refused(viewers: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    token = tmp_path / "view"
    token.write_text("v1ew\n")
    with serve("--view-token-file", str(token)) as running:
        viewers.get(f"{running.http}/rooms/{ROOM}?token=wrong")
        WebDriverWait(viewers, WAIT_S).until(
            lambda d: "view token was refused" in d.find_element(By.ID, "status").text
        )
        viewers.get(f"{running.http}/rooms/{ROOM}?token=v1ew")  # the right one: on to the room
        WebDriverWait(viewers, WAIT_S).until(
            lambda d: "No such room yet, check the link" in d.find_element(By.ID, "status").text
        )


def test_viewer_page_reconnects_and_misses_nothing(viewers: Any) -> None:
    import asyncio
    import json

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from serve_fixture import stream_clip
    from websockets.asyncio.client import connect

    settings = {"block_ms": "chunk", "tail_padding_s": 0.66}  # file's, to compare with it

    with serve() as running:

        def publish(path: str) -> None:
            async def run() -> None:
                async with connect(running.url) as ws:
                    await stream_clip(ws, path, room=ROOM, **settings)

            asyncio.run(run())

        clips = [clip(index) for index in range(4)]
        expected = file_events(*clips)
        finals = [r["text"] for path in clips for r in expected[path] if r["type"] == "final"]
        assert all(finals) and len(finals) == 4, finals
        proxy = Proxy(running.port)
        try:
            publish(clips[0])
            viewers.get(f"http://127.0.0.1:{proxy.port}/rooms/{ROOM}")
            wait = WebDriverWait(viewers, WAIT_S)
            wait.until(lambda d: shown(d) == finals[:1])
            proxy.cut()  # the viewer's network drops out; the talk goes on
            wait.until(lambda d: "cannot be reached" in d.find_element(By.ID, "status").text)
            publish(clips[1])
            publish(clips[2])
            proxy.down = False  # back: the page reconnects with the last room_seq it saw
            wait.until(lambda d: shown(d) == finals[:3])
            publish(clips[3])
            wait.until(lambda d: shown(d) == finals[:4])
            seen = viewers.execute_script(
                "return [...document.querySelectorAll('#captions p')].map(p => p.className)"
            )
            assert seen == ["final old", "final old", "final old", "final"], json.dumps(seen)
        finally:
            proxy.close()
