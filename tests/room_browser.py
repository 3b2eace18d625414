"""The browser side of the room tests: headless Debian chromium through selenium, the
helpers the pages' tests share, and a TCP relay whose connections a test cuts."""

from __future__ import annotations

import asyncio
import base64
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from serve_fixture import REPO, clip, stream_clip

CLIP = clip(0)
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 90.0  # a loaded machine: page, worklet and the first endpoint
ROOM = "stage"
PHONE = (390, 844)
DESKTOP = (1280, 720)


def chromium(*extra: str) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for tool in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--autoplay-policy=no-user-gesture-required",
                     *extra):  # fmt: skip
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def quitting(driver: Any) -> Iterator[Any]:
    """Yield a fixture's browser; quit it after the test, whatever happened."""
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture()
def publisher() -> Iterator[Any]:
    yield from quitting(chromium(
        "--window-size=1000,700", "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream", f"--use-file-for-fake-audio-capture={REPO / CLIP}",
    ))  # fmt: skip


@pytest.fixture()
def viewers() -> Iterator[Any]:
    yield from quitting(chromium(f"--window-size={PHONE[0]},{PHONE[1]}"))


FETCH = """
const done = arguments[arguments.length - 1];
fetch(arguments[0]).then((r) => r.arrayBuffer()).then((buffer) => {
  let binary = "";
  const bytes = new Uint8Array(buffer);
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  done(btoa(binary));
});
"""


def fetched(driver: Any, url: str) -> bytes:
    driver.set_script_timeout(WAIT_S)
    return base64.b64decode(driver.execute_async_script(FETCH, url))


SHOWN = 'return Array.from(document.querySelectorAll("#captions .final"), (e) => e.innerText);'


def shown(driver: Any) -> list[str]:
    """The finals on the page, read in one step: the page replaces its captions when a new
    talk begins, and finding the elements first, then reading each one's text, could meet
    an element already gone (StaleElementReferenceException)."""
    return [str(text) for text in driver.execute_script(SHOWN)]


class Proxy:
    """A TCP relay between the browser and the server whose connections the test cuts, and
    which then refuses new ones until restored: a viewer's network dropping out."""

    def __init__(self, port: int) -> None:
        import socket
        import threading

        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.down = False
        self.open: list[Any] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:  # the server is down: so is the relay's connection
                client.close()
                continue
            with self.lock:
                self.open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: Any, sink: Any) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            try:
                end.close()
            except OSError:
                pass

    def cut(self) -> None:
        import socket

        self.down = True
        with self.lock:
            for end in self.open:
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.open = []

    def close(self) -> None:
        self.listener.close()


def publish_clip(url: str, path: str, room: str = ROOM, **config: Any) -> list[dict[str, Any]]:
    """One utterance of `path` published to `room` over a fresh connection to `url`."""
    from websockets.asyncio.client import connect

    async def run() -> list[dict[str, Any]]:
        async with connect(url) as ws:
            return await stream_clip(ws, path, room=room, **config)

    return asyncio.run(run())


def status_text(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.ID, "status").text)
