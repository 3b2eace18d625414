"""The page `streamasr serve` ships at /, in headless Debian chromium through selenium.

Chromium's fake microphone plays a bundled clip (looped) into getUserMedia; the page's
AudioWorklet takes it to 16 kHz s16le and streams it to /ws. Where the capture starts within
the clip is up to the browser, and the bundled model's text moves with a shift of a few
milliseconds, so the page keeps a copy of exactly what it sent ("keep a copy"): the finals
the page shows must equal what `streamasr file` prints for that WAV, and the first of them
must share words with `streamasr file` on the clip itself. Screenshots are left in build/:
serve-page-live.png while listening, serve-page.png after Stop, serve-page-insecure.png
opened from an origin the browser counts as insecure (no microphone there).
"""

from __future__ import annotations

import base64
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_fixture import REPO, ServerProcess, clip, file_events, serve

CLIP = clip(0)
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 90.0  # a loaded machine: page, worklet and the first endpoint
# a name the browser resolves to the server but does not count as this machine: to it a page
# there is an insecure origin (plain http, not localhost), as from another machine
INSECURE_HOST = "captions.test"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with serve("--max-connections", "4") as running:
        yield running


@pytest.fixture()
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for tool in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1000,700",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={REPO / CLIP}",
        "--autoplay-policy=no-user-gesture-required",
        f"--host-resolver-rules=MAP {INSECURE_HOST} 127.0.0.1",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


FETCH_COPY = """
const done = arguments[arguments.length - 1];
fetch(document.getElementById("copy").href)
  .then((response) => response.arrayBuffer())
  .then((buffer) => {
    let binary = "";
    const bytes = new Uint8Array(buffer);
    for (let i = 0; i < bytes.length; i += 0x8000) {
      binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    }
    done(btoa(binary));
  });
"""


def finals(records: list[dict[str, Any]]) -> list[str]:
    return [record["text"] for record in records if record["type"] == "final"]


def test_page_finals_equal_file_on_the_audio_sent(
    server: ServerProcess, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server.http + "/")
    assert not browser.find_element(By.ID, "mic-note").is_displayed()
    browser.find_element(By.ID, "keep").click()
    browser.find_element(By.ID, "start").click()
    wait = WebDriverWait(browser, WAIT_S)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#finals .final"))
    first_seen = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#finals .final")]
    latency = browser.find_element(By.ID, "latency").text
    (REPO / "build").mkdir(exist_ok=True)
    browser.save_screenshot(str(REPO / "build" / "serve-page-live.png"))  # while listening
    browser.find_element(By.ID, "stop").click()
    wait.until(lambda d: d.find_element(By.ID, "status").text.startswith("stopped"))
    wait.until(lambda d: d.find_element(By.ID, "copy").is_displayed())
    shown = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#finals .final")]
    browser.save_screenshot(str(REPO / "build" / "serve-page.png"))
    sent = tmp_path / "sent.wav"
    browser.set_script_timeout(WAIT_S)
    sent.write_bytes(base64.b64decode(browser.execute_async_script(FETCH_COPY)))

    assert shown[: len(first_seen)] == first_seen
    live = ("--block-ms", "100", "--tail-padding", "0.3")  # the server's session defaults
    assert shown == finals(file_events(str(sent), options=live)[str(sent)])
    clip_final = finals(file_events(CLIP)[CLIP])[0]
    assert set(shown[0].split()) & set(clip_final.split()), (shown[0], clip_final)
    assert "ms of audio after onset" in latency and "wall clock" in latency


def test_an_insecure_origin_says_the_microphone_needs_https_or_localhost(
    server: ServerProcess, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"http://{INSECURE_HOST}:{server.port}/")
    note = browser.find_element(By.ID, "mic-note")
    assert browser.execute_script("return window.isSecureContext") is False
    assert note.is_displayed()
    assert note.text.startswith("The microphone needs https or localhost")
    assert f"open http://localhost:{server.port}/" in note.text and "--certfile" in note.text
    assert not browser.find_element(By.ID, "start").is_enabled()
    (REPO / "build").mkdir(exist_ok=True)
    browser.save_screenshot(str(REPO / "build" / "serve-page-insecure.png"))
