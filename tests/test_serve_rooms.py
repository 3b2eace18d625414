"""Rooms on `streamasr serve`: a real server, real publishers and viewers on 127.0.0.1.

A room's viewers (WebSocket and Server-Sent Events) must receive the finals `streamasr
file` prints for the same audio, each once and in order, whether they came before, during
or after the talk or reconnected with the last room_seq they saw; a publisher that
reconnects continues the room; bad input on the room protocol closes only its own
connection, with a reason; the tokens and the viewer limit hold.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from room_clients import Seen, publisher_gone, sse_view, ws_refusal, ws_view
from serve_fixture import (
    REPO,
    ServerProcess,
    clip,
    comparable,
    file_events,
    http_get,
    pcm,
    self_signed,
    serve,
    stream_clip,
    wait_for,
)
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

PUBLISH = "pub-s3cret"
VIEW = "view-s3cret"
#: what a session sends to be decoded with `streamasr file`'s defaults
FILE_SETTINGS = {"block_ms": "chunk", "tail_padding_s": 0.66}
MAX_VIEWERS = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("tokens")
    (folder / "publish").write_text(PUBLISH + "\n")
    (folder / "view").write_text(VIEW + "\n")
    # --max-batch 1: texts are compared with `streamasr file`'s (docs/performance.md)
    with serve(
        "--max-batch", "1", "--max-viewers", str(MAX_VIEWERS),
        "--publish-token-file", str(folder / "publish"),
        "--view-token-file", str(folder / "view"),
    ) as running:  # fmt: skip
        yield running


def feed(server: ServerProcess, room: str, query: str = "") -> str:
    return f"ws://127.0.0.1:{server.port}/rooms/{room}/ws?token={VIEW}{query}"


def without_room(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events as the publisher got them: no room_seq; `source` is the room's for readers."""
    return [{k: v for k, v in r.items() if k not in ("room_seq", "source")}
            for r in comparable(records)]  # fmt: skip


def publish(server: ServerProcess, room: str, *paths: str, realtime: bool = False) -> Any:
    """`streamasr file PATHS --server URL --room ROOM --format jsonl` (a fresh process)."""
    return subprocess.Popen(
        [sys.executable, "-m", "streamasr", "file", *paths, "--server", server.url,
         "--room", room, "--format", "jsonl", "--realtime" if realtime else "--no-realtime"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**_env(), "STREAMASR_TOKEN": PUBLISH},
    )  # fmt: skip


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


async def publish_clip(server: ServerProcess, room: str, path: str) -> list[dict]:
    async with connect(server.url, additional_headers={"Authorization": f"Bearer {PUBLISH}"}) as ws:
        return await stream_clip(ws, path, room=room, **FILE_SETTINGS)


def test_ws_and_sse_viewers_get_what_file_prints_and_a_late_viewer_catches_up(
    server: ServerProcess,
) -> None:
    paths = [clip(0), clip(1)]
    expected = file_events(*paths)
    finals = [r for path in paths for r in expected[path] if r["type"] == "final"]
    publisher = publish(server, "talk", *paths, realtime=True)
    transcript = f"{server.http}/rooms/talk/transcript.txt?token={VIEW}"
    assert wait_for(lambda: http_get(transcript)[0] == 200)

    async def view() -> tuple[Seen, Seen]:
        ws = ws_view(feed(server, "talk"), publisher_gone)
        sse = sse_view(server.port, f"/rooms/talk/events?token={VIEW}", publisher_gone)
        seen_ws, (status, seen_sse) = await asyncio.gather(ws, sse)
        assert status == 200
        return seen_ws, seen_sse

    seen_ws, seen_sse = asyncio.run(view())
    out, err = publisher.communicate(timeout=60)
    assert publisher.returncode == 0, err
    published = [json.loads(line) for line in out.splitlines()]
    for seen in (seen_ws, seen_sse):
        assert without_room(seen.finals) == without_room(finals)
        assert seen.seqs == sorted(set(seen.seqs))  # each once, in order
    # the partials a viewer saw live are the publisher's own
    live = [r for r in seen_ws.events if r["type"] == "partial"]
    assert live and all(
        p in without_room([r for r in published if r["type"] == "partial"])
        for p in without_room(live)
    )
    # a viewer arriving after the talk gets the finals kept, then the room's status
    late = asyncio.run(ws_view(feed(server, "talk"), lambda r: r["type"] == "status"))
    assert without_room(late.finals) == without_room(finals)
    assert {**late.events[-1], "talk": "-"} == {
        "type": "status", "room": "talk", "publisher": False,
        "last_room_seq": seen_ws.seqs[-1], "talk": "-",
    }  # fmt: skip
    # the transcript: `file --format text`'s lines, input after input
    text = "".join(r["text"] + "\n" for r in finals)
    assert text.strip() and http_get(transcript) == (200, text)


def test_viewers_read_the_finishing_the_publishing_session_asked_for(
    server: ServerProcess,
) -> None:
    """A session that asks for sentence case (its config key) publishes cased finals: the
    room's viewers and its transcript read what `file --sentence-case` prints."""
    path = clip(0)
    cased = [r for r in file_events(path, options=("--sentence-case",))[path]
             if r["type"] == "final"]  # fmt: skip

    async def publish_cased() -> None:
        headers = {"Authorization": f"Bearer {PUBLISH}"}
        async with connect(server.url, additional_headers=headers) as ws:
            await stream_clip(ws, path, room="cased", sentence_case=True, **FILE_SETTINGS)

    asyncio.run(publish_cased())
    late = asyncio.run(ws_view(feed(server, "cased"), lambda r: r["type"] == "status"))
    assert cased and any(r["text"] != r["text"].upper() for r in cased)  # really cased
    assert without_room(late.finals) == without_room(cased)
    transcript = f"{server.http}/rooms/cased/transcript.txt?token={VIEW}"
    assert http_get(transcript) == (200, "".join(r["text"] + "\n" for r in cased))


def test_transcripts_use_file_cue_rules(server: ServerProcess) -> None:
    asyncio.run(publish_clip(server, "cues", clip(0)))
    for fmt in ("srt", "vtt"):
        local = subprocess.run(
            [sys.executable, "-m", "streamasr", "file", clip(0), "--model", "tiny-en",
             "--format", fmt], cwd=REPO, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        # a room's WebVTT names no input (file's has a NOTE naming it)
        local = local.replace(f"NOTE {Path(clip(0)).name}\n\n", "")
        url = f"{server.http}/rooms/cues/transcript.{fmt}?token={VIEW}"
        assert "-->" in local and http_get(url) == (200, local)
    page = http_get(f"{server.http}/rooms/cues")
    assert page[0] == 200 and "room.js" in page[1]


def test_reconnect_with_last_seq_misses_nothing_and_publisher_continues_room(
    server: ServerProcess,
) -> None:
    async def run() -> tuple[list[dict], Seen, Seen, Seen, tuple[int, Seen]]:
        first = await publish_clip(server, "again", clip(2))
        talk = sum(r["type"] in ("partial", "final") for r in first)  # its last room_seq
        # a viewer that drops out at the next talk's first event (its first partial, unless
        # the viewer came late enough to get only its final, from the history)...
        dropped = asyncio.ensure_future(
            ws_view(feed(server, "again"), lambda r: r.get("room_seq", 0) > talk)
        )
        await asyncio.sleep(0)
        second = asyncio.ensure_future(publish_clip(server, "again", clip(3)))
        early = await dropped
        await second
        # ... reconnects with the last room_seq it saw
        rest = await ws_view(
            feed(server, "again", f"&after={early.seqs[-1]}"), lambda r: r["type"] == "status"
        )
        everything = await ws_view(feed(server, "again"), lambda r: r["type"] == "status")
        # an EventSource reconnects with Last-Event-ID
        sse = await sse_view(
            server.port, f"/rooms/again/events?token={VIEW}", lambda r: r["type"] == "status",
            headers={"Last-Event-ID": str(everything.finals[0]["room_seq"])},
        )  # fmt: skip
        return first, early, rest, everything, sse

    first, early, rest, everything, (status, sse) = asyncio.run(run())
    expected = file_events(clip(2), clip(3))
    finals = [r for path in (clip(2), clip(3)) for r in expected[path] if r["type"] == "final"]
    assert without_room(everything.finals) == without_room(finals)
    # together, the two connections saw every final once, in order
    joined = early.finals + rest.finals
    assert [r["room_seq"] for r in joined] == [r["room_seq"] for r in everything.finals]
    assert status == 200 and sse.finals == everything.finals[1:]
    # the second publisher (a new connection) continued the room's numbering; readers see
    # the room's name as the source, never the speakers' file names
    assert everything.finals[-1]["room_seq"] > sum(r["type"] in ("partial", "final") for r in first)
    assert {r["source"] for r in everything.finals} == {"again"}
    assert sorted(everything.seqs) == everything.seqs


def test_hostile_room_input_closes_only_its_connection(server: ServerProcess) -> None:
    asyncio.run(publish_clip(server, "calm", clip(1)))

    async def run() -> tuple[list[Any], Seen, list[dict]]:
        # a viewer that must see all of this pass and still get the next final
        canary = asyncio.ensure_future(
            ws_view(feed(server, "calm"), lambda r: r["type"] == "final" and r["text"], skip=1)
        )
        await asyncio.sleep(0.2)
        results: list[Any] = []
        results.append(await ws_refusal(feed(server, "nobody")))
        results.append(await ws_refusal(feed(server, "calm", "&after=-1")))
        status, seen = await sse_view(server.port, f"/rooms/nobody/events?token={VIEW}", bool)
        results.append((status, seen.reason))
        for long_name in ("x" * 10_000, "x" * 100):
            try:
                async with connect(feed(server, long_name)):
                    pass
            except InvalidStatus as exc:
                results.append((exc.response.status_code, exc.response.body.decode()))
        # a viewer sending audio (or anything) is closed
        async with connect(feed(server, "calm")) as ws:
            await ws.send(b"\x00\x01" * 1600)
            try:
                while True:
                    await ws.recv()
            except ConnectionClosed as exc:
                assert exc.rcvd is not None
                results.append((exc.rcvd.code, exc.rcvd.reason))
        # hostile room names in a publisher's config
        headers = {"Authorization": f"Bearer {PUBLISH}"}
        for room in (["calm"], 7, "../etc", "a" * 65, "calm\n"):
            async with connect(server.url, additional_headers=headers) as ws:
                await ws.send(json.dumps({"sample_rate": 16000, "room": room}))
                try:
                    await ws.recv()
                except ConnectionClosed as exc:
                    assert exc.rcvd is not None
                    results.append((exc.rcvd.code, exc.rcvd.reason))
        events = await publish_clip(server, "calm", clip(1))
        return results, await canary, events

    results, canary, events = asyncio.run(run())
    assert results[0] == (4404, "no such room yet, check the link: no one has published to "
                          "room nobody (names are case-sensitive)")  # fmt: skip
    assert results[1][0] == 1007 and "after" in results[1][1]
    assert results[2][0] == 404 and "no such room yet" in results[2][1]
    assert results[3][0] == 414  # the request line is too long for the server to read
    assert results[4][0] == 400 and "letters, digits" in results[4][1]
    assert results[5][0] == 1003 and "viewers only receive" in results[5][1]
    for code, reason in results[6:11]:
        assert code == 1007 and "room must be 1 to 64 letters" in reason
    last = [r for r in events if r["type"] == "final"][-1]
    assert without_room(canary.finals[-1:]) == without_room([last])


def test_tokens_and_viewer_limit(server: ServerProcess) -> None:
    asyncio.run(publish_clip(server, "full", clip(1)))
    base = f"ws://127.0.0.1:{server.port}/rooms/full/ws"

    async def run() -> tuple[list[Any], str]:
        results: list[Any] = []
        results.append(await ws_refusal(base))
        results.append(await ws_refusal(base + "?token=wrong"))
        status, seen = await sse_view(server.port, "/rooms/full/events", bool)
        results.append((status, seen.reason))
        results.append(http_get(f"{server.http}/rooms/full/transcript.txt")[0])
        # publishing without the publish token: /ws is open (no --token-file), the room not
        async with connect(server.url) as ws:
            await ws.send(json.dumps({"sample_rate": 16000, "room": "full"}))
            try:
                await ws.recv()
            except ConnectionClosed as exc:
                assert exc.rcvd is not None
                results.append((exc.rcvd.code, exc.rcvd.reason))
        # the viewer limit: MAX_VIEWERS are in, the next is refused, one leaves, it gets in
        holders = [await connect(feed(server, "full")) for _ in range(MAX_VIEWERS)]
        for holder in holders:
            while json.loads(await holder.recv())["type"] != "status":
                pass
        results.append(await ws_refusal(feed(server, "full")))
        status, seen = await sse_view(server.port, f"/rooms/full/events?token={VIEW}", bool)
        results.append(status)
        metrics = (await asyncio.to_thread(http_get, server.http + "/metrics"))[1]
        await holders.pop().close()
        seen = Seen()
        for _ in range(50):  # the server notices the close on its next turn
            seen = await ws_view(feed(server, "full"), lambda r: r["type"] == "status")
            if seen.code is None:
                break
            await asyncio.sleep(0.1)
        results.append(seen.events[-1]["type"] if seen.events else seen.code)
        for holder in holders:
            await holder.close()
        return results, metrics

    results, metrics = asyncio.run(run())
    gauges = dict(re.findall(r"^(streamasr_room\w*) (\S+)$", metrics, re.M))
    assert float(gauges["streamasr_room_viewers"]) >= MAX_VIEWERS  # these, at least
    assert float(gauges["streamasr_rooms"]) >= 1
    assert results[0] == (4401, "missing or wrong view token: add ?token=TOKEN to the address")
    assert results[1][0] == 4401
    assert results[2][0] == 401 and "view token" in results[2][1]
    assert results[3] == 401
    assert results[4][0] == 1008 and "publish token" in results[4][1]
    assert results[5][0] == 4429 and "--max-viewers" in results[5][1]
    assert results[6] == 503
    assert results[7] == "status"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("file", "x.wav", "--room", "talk"), "give --server URL too"),
        (("mic", "--room", "talk"), "give --server URL too"),
        (("file", "x.wav", "--server", "ws://127.0.0.1:1/ws", "--room", "a/b"), "--room"),
        (("serve", "--max-viewers", "0"), "--max-viewers 0"),
        (("serve", "--workers", "2", "--view-token-file", "README.md"), "need --rooms redis://"),
        (("serve", "--rooms", "http://x"), "--rooms http://x: give redis://"),
        (("serve", "--max-rooms", "0"), "--max-rooms 0"),
    ],
)
def test_room_options_are_usage_errors(args: tuple[str, ...], words: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streamasr", *args], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 2 and words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_fan_out_to_50_viewers_then_sigterm_closes_them(tmp_path: Path) -> None:
    """CI-sized fan-out: 1 publisher, 25 WebSocket and 25 SSE viewers, every one gets every
    final once, in order; then SIGTERM flushes the publisher and closes the viewers."""
    with serve("--max-batch", "1") as running:

        async def run() -> tuple[list[dict], list[Seen], list[int]]:
            async with connect(running.url) as ws:
                first = await stream_clip(ws, clip(0), room="crowd", **FILE_SETTINGS)
                url = f"ws://127.0.0.1:{running.port}/rooms/crowd/ws"
                waiting = [
                    asyncio.ensure_future(ws_view(url, lambda r: r["type"] == "final", skip=1))
                    for _ in range(25)
                ]
                sse = [
                    asyncio.ensure_future(
                        sse_view(running.port, "/rooms/crowd/events",
                                 lambda r: r["type"] == "final", skip=1)
                    )
                    for _ in range(25)
                ]  # fmt: skip
                await asyncio.sleep(1.0)
                second = await stream_clip(ws, clip(1), room="crowd", **FILE_SETTINGS)
                seen = list(await asyncio.gather(*waiting))
                sse_seen = await asyncio.gather(*sse)
            statuses = [status for status, _ in sse_seen]
            return first + second, seen + [s for _, s in sse_seen], statuses

        events, seen, statuses = asyncio.run(run())
        finals = without_room([r for r in events if r["type"] == "final"])
        assert statuses == [200] * 25
        for viewer in seen:
            assert without_room(viewer.finals) == finals
            assert viewer.seqs == sorted(set(viewer.seqs))

        async def hold() -> Seen:
            url = f"ws://127.0.0.1:{running.port}/rooms/crowd/ws"
            task = asyncio.ensure_future(ws_view(url, lambda r: False))
            await asyncio.sleep(0.5)
            running.process.send_signal(15)
            return await task

        closed = asyncio.run(hold())
        assert closed.code == 1001 and "shutting down" in closed.reason
        assert running.stop() == 0


def test_a_new_publisher_takes_over_from_one_still_connected(server: ServerProcess) -> None:
    """A speaker whose connection died unnoticed connects again: the new connection takes
    the room over; the old one is closed (4409) with the reason."""
    from websockets.exceptions import ConnectionClosed

    headers = {"Authorization": f"Bearer {PUBLISH}"}

    async def run() -> tuple[list[dict], Any, Seen]:
        async with connect(server.url, additional_headers=headers) as holder:
            _, rate = pcm(clip(2))
            await holder.send(json.dumps({"sample_rate": rate, "source": "held", "room": "over"}))
            # the holder is the room's speaker before the new one comes (on a loaded machine
            # its config could otherwise be read after the new speaker's)
            await ws_view(feed(server, "over"), lambda r: r.get("publisher") is True)
            taken = await publish_clip(server, "over", clip(1))
            try:
                while True:
                    await holder.recv()
            except ConnectionClosed as exc:
                closed = exc.rcvd
        # until the room says its speaker left: a late reader may join before the server has
        # seen the new speaker's connection close (its first status then still says True)
        late = await asyncio.wait_for(ws_view(feed(server, "over"), lambda r: (
            r["type"] == "status" and r["publisher"] is False)), 60)
        return taken, closed, late

    taken, closed, late = asyncio.run(run())
    assert closed.code == 4409 and "room over: another speaker took over" in closed.reason
    assert without_room(late.finals) == without_room([r for r in taken if r["type"] == "final"])
    assert late.events[-1]["publisher"] is False


def test_feeds_over_tls(tmp_path: Path) -> None:
    """wss:// and https://: the room feeds serve over TLS as over plain connections."""
    import ssl

    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(cafile=str(cert))
    with serve("--certfile", str(cert), "--keyfile", str(key)) as running:
        url = running.url.replace("ws://", "wss://")

        async def run() -> tuple[list[dict], Seen, tuple[int, Seen]]:
            async with connect(url, ssl=context) as ws:
                events = await stream_clip(ws, clip(1), room="secure", **FILE_SETTINGS)
                feed_url = f"wss://127.0.0.1:{running.port}/rooms/secure/ws"
                until = lambda r: r["type"] == "status"  # noqa: E731
                seen = await ws_view(feed_url, until, ssl=context)
                sse = await sse_view(running.port, "/rooms/secure/events", until, ssl=context)
            return events, seen, sse

        events, seen, (status, sse) = asyncio.run(run())
        assert running.stop() == 0
    finals = without_room([r for r in events if r["type"] == "final"])
    assert finals and without_room(seen.finals) == finals
    assert status == 200 and without_room(sse.finals) == finals
