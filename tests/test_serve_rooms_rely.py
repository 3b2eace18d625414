"""What a speaker and a reader of a room can rely on, in headless chromium and over the
protocol: a reader's page follows a new talk after the server restarts, without a reload;
an unknown room says to check the link; readers get the finishing the speaker asked for
(the server finishes a room's finals), and a server that cannot is said in one line; a
refused config reaches the speaker page as a plain line.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import soundfile as sf
from room_browser import (
    ROOM,
    WAIT_S,
    Proxy,
    publish_clip,
    publisher,
    shown,
    status_text,
    viewers,
)
from room_clients import ws_view
from selenium.webdriver.support.ui import WebDriverWait
from serve_fixture import REPO, clip, file_events, pcm, serve, wait_for

__all__ = ["publisher", "viewers"]  # the fixture, for pytest

#: what a session sends to be decoded with `streamasr file`'s defaults
FILE_SETTINGS = {"block_ms": "chunk", "tail_padding_s": 0.66}
PUNCT = REPO / "models" / "tiny-punct-en"


def test_reader_page_follows_the_next_talk_after_a_server_restart(viewers: Any) -> None:
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


def speak(url: str, room: str, path: str, *finishing: str) -> tuple[int, list[str], str]:
    """`streamasr file PATH --server URL --room ROOM FINISHING`: its exit status, the finals
    it printed, its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "streamasr", "file", path, "--server", url, "--room", room,
         "--format", "jsonl", *finishing],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    finals = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, [r["text"] for r in finals if r["type"] == "final"], done.stderr


def read_room(port: int, room: str) -> list[str]:
    """The finals a reader joining room `room` now is sent (the kept ones)."""
    url = f"ws://127.0.0.1:{port}/rooms/{room}/ws"
    seen = asyncio.run(ws_view(url, lambda record: record["type"] == "status"))
    return [record["text"] for record in seen.finals]


def test_readers_get_the_finishing_the_speaker_asked_for() -> None:
    path = clip(0)
    cased = [r["text"] for r in file_events(path, options=("--sentence-case",))[path]
             if r["type"] == "final"]  # fmt: skip
    assert any(text != text.upper() for text in cased)
    with serve("--max-batch", "1") as plain:
        status, spoken, _ = speak(plain.url, "cased", path, "--sentence-case")
        assert status == 0 and spoken == cased
        assert read_room(plain.port, "cased") == cased
        # punctuation from a server without a model: one line says so, nothing published
        status, _, said = speak(plain.url, "marks", path, "--punctuate", "punct-en")
        lines = [line for line in said.splitlines() if line.strip()]
        assert status != 0 and "punctuation model" in lines[0], said  # the line that says why
        assert lines[1:] == ["1 of 1 inputs failed"], said
    with serve("--max-batch", "1", "--punctuate", str(PUNCT)) as punctuating:
        # the server's punctuation stays on for a speaker asking for sentence case
        status, spoken, _ = speak(punctuating.url, "marked", path, "--sentence-case")
        assert status == 0 and spoken != cased and any("." in t or "," in t for t in spoken)
        assert read_room(punctuating.port, "marked") == spoken


def test_a_refusal_reaches_the_speaker_page_as_a_plain_line(publisher: Any) -> None:
    from selenium.webdriver.common.by import By

    with serve() as running:
        publisher.get(f"{running.http}/?room=no.such.name")  # not a room's name: refused
        publisher.find_element(By.ID, "start").click()
        wait = WebDriverWait(publisher, WAIT_S)
        wait.until(lambda d: publisher.find_element(By.ID, "start").is_enabled())
        time.sleep(1.0)  # the microphone's promise settles after the close
        said = status_text(publisher)
        assert said.startswith("refused by the server:") and "room" in said, said
        assert "Cannot read" not in said


def test_nothing_local_reaches_readers_or_published_files(tmp_path: Any) -> None:
    path = str(REPO / clip(0))  # typed as an absolute path, folders of this machine in it
    folder = str(REPO / clip(0)).rsplit("/", 1)[0]
    with serve("--max-batch", "1") as running:
        done = subprocess.run(
            [sys.executable, "-m", "streamasr", "file", path, "--server", running.url,
             "--room", "private", "--format", "vtt,jsonl", "-o", str(tmp_path)],
            cwd=REPO, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        url = f"ws://127.0.0.1:{running.port}/rooms/private/ws"
        seen = asyncio.run(ws_view(url, lambda record: record["type"] == "status"))
        publish_clip(running.url, clip(1), room="asked", room_source=True)  # asked for
        url = f"ws://127.0.0.1:{running.port}/rooms/asked/ws"
        asked = asyncio.run(ws_view(url, lambda record: record["type"] == "status"))
    assert asked.finals and {record["source"] for record in asked.finals} == {clip(1)}
    assert seen.finals and all(record["source"] == "private" for record in seen.finals)
    assert not any(folder in json.dumps(record) for record in seen.events)
    vtt = next(tmp_path.glob("*.vtt")).read_text()
    assert vtt.startswith("WEBVTT\n\nNOTE 0.wav\n\n") and "-->" in vtt
    assert folder not in vtt


def test_a_displaced_speaker_is_told_in_one_line_and_readers_see_the_takeover() -> None:
    from websockets.asyncio.client import connect

    with serve("--max-batch", "1") as running:
        first = subprocess.Popen(
            [sys.executable, "-m", "streamasr", "file", clip(0), "--server", running.url,
             "--room", ROOM, "--realtime", "--format", "jsonl"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

        async def watch() -> list[dict[str, Any]]:
            url = f"ws://127.0.0.1:{running.port}/rooms/{ROOM}/ws"
            async with connect(url) as ws:
                statuses = []
                while True:
                    record = json.loads(await ws.recv())
                    if record["type"] != "status":
                        continue
                    statuses.append(record)
                    if record["publisher"] and len(statuses) == 1:  # the first one speaks
                        asyncio.get_running_loop().run_in_executor(
                            None, lambda: publish_clip(running.url, clip(1), **FILE_SETTINGS))
                    if record.get("took_over"):
                        return statuses

        assert wait_for(lambda: read_room_status(running.port) is not None, 60)
        statuses = asyncio.run(asyncio.wait_for(watch(), 60))
        _, said = first.communicate(timeout=120)
    assert statuses[-1]["publisher"] and statuses[-1]["took_over"]
    assert first.returncode != 0
    told = [line for line in said.splitlines() if "another speaker took over" in line]
    assert len(told) == 1 and f"room {ROOM}" in told[0] and "(4409)" in told[0], said


def read_room_status(port: int) -> dict[str, Any] | None:
    """The room's status as a reader joining now is sent (None: no such room yet)."""
    url = f"ws://127.0.0.1:{port}/rooms/{ROOM}/ws"
    seen = asyncio.run(ws_view(url, lambda record: record["type"] == "status"))
    statuses = [record for record in seen.events if record["type"] == "status"]
    return statuses[-1] if statuses and statuses[-1]["publisher"] else None


def test_a_file_published_to_a_room_is_paced_in_real_time() -> None:
    from websockets.asyncio.client import connect

    paths = [clip(0), clip(2), clip(3)]
    audio_s = sum(sf.info(REPO / path).duration for path in paths)  # 7.9 s

    async def run(url: str, port: int) -> tuple[int, list[float]]:
        async with connect(f"ws://127.0.0.1:{port}/rooms/{ROOM}/ws") as ws:
            while json.loads(await ws.recv())["type"] != "status":
                pass  # the room's history, then its status: what follows is live
            talk = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "streamasr", "file", *paths, "--server", url,
                "--room", ROOM, "--format", "jsonl", cwd=REPO,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            loop, times = asyncio.get_running_loop(), []

            async def read() -> None:
                while True:
                    if json.loads(await ws.recv())["type"] in ("partial", "final"):
                        times.append(loop.time())

            reading = asyncio.ensure_future(read())
            status = await talk.wait()
            await asyncio.sleep(1.0)
            reading.cancel()
            return status, times

    with serve("--max-batch", "1") as running:
        publish_clip(running.url, clip(1), **FILE_SETTINGS)  # the room exists
        status, times = asyncio.run(run(running.url, running.port))
    assert status == 0 and len(times) > 3
    assert times[-1] - times[0] > 0.6 * audio_s, (times[-1] - times[0], audio_s)


PHONE_VIEW = """
const c = document.getElementById("captions"), box = c.getBoundingClientRect();
const partial = c.querySelector(".partial"), first = c.querySelector(".final");
const bottom = partial ? partial.getBoundingClientRect().bottom : null;
c.scrollTop = 0;
return {overflows: c.scrollHeight > c.clientHeight + 10, partialBottom: bottom,
        boxTop: box.top, boxBottom: box.bottom, firstTop: first.getBoundingClientRect().top,
        header: document.querySelector("header").getBoundingClientRect().bottom,
        firstText: first.textContent, partialWords: partial ? partial.textContent.length : 0};
"""


def test_long_partials_stay_readable_on_a_phone(viewers: Any) -> None:
    from websockets.sync.client import connect

    clips = [clip(index) for index in range(4)]
    with serve() as running:
        said = [publish_clip(running.url, path, **FILE_SETTINGS) for path in clips]
        first = next(r["text"] for r in said[0] if r["type"] == "final" and r["text"])
        viewers.get(f"{running.http}/rooms/{ROOM}")  # the fixture's window is a phone's
        wait = WebDriverWait(viewers, WAIT_S)
        wait.until(lambda d: len(shown(d)) >= 4)
        with connect(running.url) as ws:  # one long sentence: no endpoint in 29 s
            audio = b"".join(pcm(path)[0] for path in clips * 3)
            ws.send(json.dumps({"sample_rate": pcm(clips[0])[1], "format": "s16le",
                                "channels": 1, "room": ROOM, "endpoint": False}))  # fmt: skip
            for start in range(0, len(audio), 32000):
                ws.send(audio[start : start + 32000])
            longest = 0
            while longest < 150:
                record = json.loads(ws.recv(timeout=WAIT_S))
                if record["type"] == "partial":
                    longest = len(record["text"])
            wait.until(lambda d: d.execute_script(
                "const p = document.querySelector('#captions .partial');"
                "return p ? p.textContent.length : 0;") >= 150)  # fmt: skip
            time.sleep(0.5)
            view = viewers.execute_script(PHONE_VIEW)
    assert view["overflows"], view  # the long partial needs more than the phone's screen
    # the newest words are on screen, above the bottom of the captions
    assert view["boxTop"] < view["partialBottom"] <= view["boxBottom"] + 2, view
    # scrolled back, the first final is there whole, below the header
    assert view["firstText"] == first, view
    assert view["firstTop"] >= max(view["boxTop"], view["header"]) - 1, view
