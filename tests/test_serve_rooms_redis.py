"""Rooms across servers through a real Redis (`serve --rooms redis://...`).

A publisher on server A; WebSocket and SSE readers on server B and on a `--workers 2`
server: each reader gets the finals `streamasr file` prints, each once, in order, whichever
server it reached; a late reader catches up; a reader that moves to another server with the
last room_seq it saw misses nothing and repeats nothing, also when its server was killed,
and when it came through the HAProxy recipe (scripts/deploy/haproxy.cfg) to a server that
was killed and comes back through it to the other; Redis stopped and started again
mid-talk: the publisher's own captions go on, readers are told the room is interrupted,
and the room continues.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from haproxy_fixture import haproxy, metric
from redis_fixture import RedisProcess, redis_server
from room_clients import Seen, publisher_gone, sse_view, ws_view
from serve_fixture import (
    REPO,
    ServerProcess,
    clip,
    comparable,
    file_events,
    http_get,
    serve,
    wait_for,
)
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake

from streamasr.server.room_broker import CLOCK_FIELD, ROOM_CLOCK_ENV

pytest.importorskip("redis")

TALK = [clip(0), clip(1), clip(2), clip(3)]


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    with redis_server(tmp_path_factory.mktemp("redis")) as running:
        yield running


@pytest.fixture(scope="module")
def server_a(redis: RedisProcess) -> Iterator[ServerProcess]:
    # --max-batch 1: texts are compared with `streamasr file`'s (docs/performance.md)
    with serve("--rooms", redis.url, "--max-batch", "1") as running:
        yield running


@pytest.fixture(scope="module")
def workers(redis: RedisProcess) -> Iterator[ServerProcess]:
    with serve("--workers", "2", env={"STREAMASR_ROOMS_URL": redis.url}) as running:
        yield running


@pytest.fixture(scope="module")
def server_b(redis: RedisProcess) -> Iterator[ServerProcess]:
    with serve("--rooms", redis.url) as running:
        yield running


@pytest.fixture(scope="module")
def expected() -> list[dict[str, Any]]:
    events = file_events(*TALK)
    return without_room([r for path in TALK for r in events[path] if r["type"] == "final"])


def publish(server: ServerProcess, room: str, *paths: str) -> subprocess.Popen[str]:
    """`streamasr file PATHS --server URL --room ROOM --realtime --format jsonl`."""
    return subprocess.Popen(
        [sys.executable, "-m", "streamasr", "file", *paths, "--server", server.url,
         "--room", room, "--format", "jsonl", "--realtime"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def published_finals(publisher: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, err = publisher.communicate(timeout=120)
    assert publisher.returncode == 0, err
    return without_room([r for r in map(json.loads, out.splitlines()) if r["type"] == "final"])


def ws_url(server: ServerProcess, room: str, query: str = "") -> str:
    return f"ws://127.0.0.1:{server.port}/rooms/{room}/ws{query}"


def without_room(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events as the publisher got them: no room_seq; `source` is the room's for readers."""
    return [{k: v for k, v in r.items() if k not in ("room_seq", "source")}
            for r in comparable(records)]  # fmt: skip


def room_exists(server: ServerProcess, room: str) -> bool:
    return http_get(f"{server.http}/rooms/{room}/transcript.txt")[0] == 200


def once_in_order(seen: Seen) -> None:
    assert seen.seqs == sorted(set(seen.seqs))


def test_readers_on_other_servers_get_what_file_prints(
    server_a: ServerProcess, server_b: ServerProcess, workers: ServerProcess,
    expected: list[dict[str, Any]],
) -> None:  # fmt: skip
    publisher = publish(server_a, "talk", *TALK)
    assert wait_for(lambda: room_exists(server_b, "talk"))

    async def view() -> list[Seen]:
        readers = [
            ws_view(ws_url(server_b, "talk"), publisher_gone),
            ws_view(ws_url(workers, "talk"), publisher_gone),
            sse_view(server_b.port, "/rooms/talk/events", publisher_gone),
            sse_view(workers.port, "/rooms/talk/events", publisher_gone),
        ]
        done = await asyncio.gather(*readers)
        return [d if isinstance(d, Seen) else d[1] for d in done]

    seen = asyncio.run(view())
    assert published_finals(publisher) == expected
    for reader in seen:
        assert without_room(reader.finals) == expected
        once_in_order(reader)
    # a late reader, on any server, gets the kept finals, then the status
    for server in (server_b, workers, server_a):
        late = asyncio.run(ws_view(ws_url(server, "talk"), lambda r: r["type"] == "status"))
        assert without_room(late.finals) == expected
        assert late.events[-1]["publisher"] is False
        assert late.events[-1]["last_room_seq"] == seen[0].seqs[-1]
    text = "".join(r["text"] + "\n" for r in expected)
    assert http_get(f"{workers.http}/rooms/talk/transcript.txt") == (200, text)


def test_a_reader_moving_servers_misses_nothing(
    server_a: ServerProcess, server_b: ServerProcess, workers: ServerProcess,
    expected: list[dict[str, Any]],
) -> None:  # fmt: skip
    publisher = publish(server_a, "moving", *TALK)
    assert wait_for(lambda: room_exists(server_b, "moving"))

    async def move() -> tuple[Seen, Seen, tuple[int, Seen]]:
        first = await ws_view(ws_url(server_b, "moving"), lambda r: r["type"] == "final")
        after = first.seqs[-1]
        rest = await ws_view(ws_url(workers, "moving", f"?after={after}"), publisher_gone)
        # an EventSource moving with Last-Event-ID
        sse = await sse_view(
            server_b.port, "/rooms/moving/events", lambda r: r["type"] == "status",
            headers={"Last-Event-ID": str(after)},
        )  # fmt: skip
        return first, rest, sse

    first, rest, (status, sse) = asyncio.run(move())
    assert published_finals(publisher) == expected
    joined = first.finals + rest.finals
    assert rest.finals and without_room(joined) == expected
    assert [r["room_seq"] for r in joined] == sorted({r["room_seq"] for r in joined})
    assert status == 200 and sse.finals == rest.finals


def test_a_killed_server_s_readers_reconnect_elsewhere(
    redis: RedisProcess, server_a: ServerProcess, workers: ServerProcess,
    expected: list[dict[str, Any]],
) -> None:  # fmt: skip
    with serve("--rooms", redis.url) as doomed:
        publisher = publish(server_a, "killed", *TALK)
        assert wait_for(lambda: room_exists(doomed, "killed"))

        async def watch() -> tuple[Seen, Seen]:
            seen = Seen()
            watching = asyncio.ensure_future(
                ws_view(ws_url(doomed, "killed"), publisher_gone, seen=seen)
            )
            while not seen.finals:
                await asyncio.sleep(0.05)
            doomed.process.send_signal(signal.SIGKILL)
            await watching  # the connection drops
            query = f"?after={seen.seqs[-1]}"
            return seen, await ws_view(ws_url(workers, "killed", query), publisher_gone)

        before, after = asyncio.run(watch())
        assert before.code != 1000 and after.finals  # dropped mid-talk
    assert published_finals(publisher) == expected
    joined = before.finals + after.finals
    assert without_room(joined) == expected
    assert [r["room_seq"] for r in joined] == sorted({r["room_seq"] for r in joined})


async def through_balancer(front: int, room: str, kind: str, seen: Seen) -> int:
    """A reader reaching the room through the balancer at `front` until the publisher
    leaves: after a drop it connects again, through the balancer, with the last room_seq it
    saw (`?after=`, SSE: `Last-Event-ID`, as a browser's EventSource sends it). How many
    times its connection dropped."""
    drops = 0
    while True:
        last = seen.seqs[-1] if seen.seqs else None
        try:
            if kind == "ws":
                query = "" if last is None else f"?after={last}"
                url = f"ws://127.0.0.1:{front}/rooms/{room}/ws{query}"
                await ws_view(url, publisher_gone, seen=seen)
            else:
                headers = {} if last is None else {"Last-Event-ID": str(last)}
                status, _ = await sse_view(front, f"/rooms/{room}/events", publisher_gone,
                                           headers=headers, seen=seen)  # fmt: skip
                if status != 200:  # the balancer had no instance for it yet
                    raise ConnectionError(status)
        except (OSError, InvalidHandshake):
            await asyncio.sleep(0.2)
            continue
        if seen.events and publisher_gone(seen.events[-1]):
            return drops
        drops += 1


def test_readers_behind_haproxy_reconnect_past_a_killed_server(
    redis: RedisProcess, server_a: ServerProcess, expected: list[dict[str, Any]],
) -> None:  # fmt: skip
    """The recipe of docs/serve.md (scripts/deploy/haproxy.cfg, as shipped) in front of two
    servers of one Redis, the publisher on a third: WebSocket and SSE readers come through
    HAProxy, one after another, until one server has readers of both kinds; it is killed
    (SIGKILL) mid-talk; its readers come back through HAProxy to the other and, with the
    readers that were there all along, get every final once, in order."""
    with (
        serve("--rooms", redis.url) as one,
        serve("--rooms", redis.url) as two,
        haproxy(one, two) as front,
    ):
        publisher = publish(server_a, "balanced", *TALK)
        assert wait_for(lambda: room_exists(one, "balanced"))

        def readers_on() -> tuple[float, float]:
            return metric(one, "streamasr_room_viewers"), metric(two, "streamasr_room_viewers")

        async def watch() -> tuple[list[tuple[str, ServerProcess, Seen]], list[int], ServerProcess]:
            readers: list[tuple[str, ServerProcess, Seen]] = []
            reading = []
            for kind in ["ws", "sse", "sse", "ws"] * 2:
                before = await asyncio.to_thread(readers_on)
                seen = Seen()
                reading.append(asyncio.ensure_future(
                    through_balancer(front, "balanced", kind, seen)))  # fmt: skip
                while not seen.events:  # joined: the status came
                    await asyncio.sleep(0.05)
                after = await asyncio.to_thread(readers_on)
                readers.append((kind, one if after[0] > before[0] else two, seen))
                doomed = next((server for server in (one, two)
                               if {k for k, at, _ in readers if at is server} == {"ws", "sse"}),
                              None)  # fmt: skip
                if doomed is not None:
                    break
            assert doomed is not None
            while not all(seen.finals for _, _, seen in readers):
                await asyncio.sleep(0.05)
            doomed.process.send_signal(signal.SIGKILL)
            return readers, list(await asyncio.gather(*reading)), doomed

        readers, drops, doomed = asyncio.run(watch())
    assert published_finals(publisher) == expected
    for (_, at, seen), dropped in zip(readers, drops, strict=True):
        assert (dropped > 0) == (at is doomed)  # the killed server's readers, and only they
        assert without_room(seen.finals) == expected
        once_in_order(seen)


def test_redis_restarted_mid_talk_the_room_continues(
    redis: RedisProcess, server_a: ServerProcess, server_b: ServerProcess,
    expected: list[dict[str, Any]],
) -> None:  # fmt: skip
    publisher = publish(server_a, "restart", *TALK)
    assert wait_for(lambda: room_exists(server_b, "restart"))

    async def watch() -> Seen:
        seen = Seen()
        watching = asyncio.ensure_future(
            ws_view(ws_url(server_b, "restart"), publisher_gone, seen=seen)
        )
        while not seen.finals:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(redis.stop)
        await asyncio.sleep(1.5)
        await asyncio.to_thread(redis.start)
        return await asyncio.wait_for(watching, 60)

    seen = asyncio.run(watch())
    # the publisher's own captions went on, whole
    assert published_finals(publisher) == expected
    statuses = [r for r in seen.events if r["type"] == "status"]
    assert any(r.get("interrupted") for r in statuses)
    assert not statuses[-1].get("interrupted")
    assert without_room(seen.finals) == expected
    once_in_order(seen)


def test_readers_arriving_together_all_get_in(
    server_a: ServerProcess, server_b: ServerProcess
) -> None:
    """A talk's link shared: 300 readers joining one server at the same moment are all let
    in, each with the kept finals, none turned away as if Redis were unreachable (joining
    readers share the room's reads; a burst no longer asks for a connection each)."""
    finals = published_finals(publish(server_a, "together", clip(0)))

    async def arrive() -> list[tuple[int, Seen]]:
        joining = [sse_view(server_b.port, "/rooms/together/events",
                            lambda r: r["type"] == "status") for _ in range(300)]  # fmt: skip
        return await asyncio.gather(*joining)

    for status, seen in asyncio.run(arrive()):
        assert status == 200, seen.reason
        assert without_room(seen.finals) == finals and seen.events[-1]["publisher"] is False


def test_the_measurement_clock_reaches_readers_only_when_asked(
    redis: RedisProcess, server_b: ServerProcess
) -> None:
    """STREAMASR_ROOM_CLOCK=1 on the publisher's server (scripts/room_load.py): each event
    readers get, on any server, carries that server's monotonic clock from when the engine's
    step handed it over: in order, and no later than the reader's receipt on the same clock.
    The publisher's own events never carry it (nor, without the setting, do readers': the
    other tests compare their events field by field)."""
    with serve("--rooms", redis.url, env={ROOM_CLOCK_ENV: "1"}) as stamping:
        publisher = publish(stamping, "clocked", clip(0))
        assert wait_for(lambda: room_exists(server_b, "clocked"))

        async def read() -> list[tuple[dict[str, Any], float]]:
            got = []
            async with connect(ws_url(server_b, "clocked")) as ws:
                while True:
                    record = json.loads(await ws.recv())
                    got.append((record, time.monotonic()))
                    if publisher_gone(record):
                        return got

        received = [(r, at) for r, at in asyncio.run(read()) if "room_seq" in r]
        out, _ = publisher.communicate(timeout=120)
    own = [json.loads(line) for line in out.splitlines()]
    assert own and not any(CLOCK_FIELD in r for r in own)
    stamps = [r[CLOCK_FIELD] for r, _ in received]
    assert received and stamps == sorted(stamps)
    assert all(r[CLOCK_FIELD] <= at for r, at in received)
    finals = [{k: v for k, v in r.items() if k != CLOCK_FIELD} for r, _ in received
              if r["type"] == "final"]  # fmt: skip
    assert without_room(finals) == without_room([r for r in own if r["type"] == "final"])


def test_hostile_names_never_become_keys(server_b: ServerProcess) -> None:
    """A name that would be a Redis key pattern or command is refused before Redis."""
    for name in ("a*", "a:b", "a%0d%0aFLUSHALL", "x" * 65):
        assert http_get(f"{server_b.http}/rooms/{name}/transcript.txt")[0] in (400, 404)
    assert http_get(f"{server_b.http}/rooms/talk/events?after=%C2%B2")[0] == 400
    assert http_get(f"{server_b.http}/rooms/talk/events?after={'9' * 5000}")[0] == 400
