"""A room's fan-out over real TCP connections on 127.0.0.1, in one process: a viewer that
stops reading is dropped once its unsent bytes pass the bound, and the room and its other
viewers go on, every event once and in order.

(tests/test_serve_rooms.py runs rooms on a real server; a reader slow enough to fill the
bound there would take minutes of real talk, so the bound is met here with large events.)
"""

from __future__ import annotations

import asyncio
import socket

from streamasr.server.app import StreamServer
from streamasr.server.limits import Security, ServerLimits
from streamasr.server.room_feeds import CLOSE_FLUSH_S
from streamasr.server.rooms import Room, RoomOptions
from streamasr.server.web import build_app, web_server
from streamasr.server.workers import bind
from streamasr.session.stream import StreamOptions

BOUND = 64 * 1024
EVENT_BYTES = 16 * 1024
EVENTS = 200
REQUEST = b"GET /rooms/talk/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def _event(number: int) -> dict:
    return {"source": "talk", "type": "partial", "seq": number, "audio_s": 0.1 * number,
            "wall_s": 0.1 * number, "segment": 0, "text": "word " * (EVENT_BYTES // 5)}


async def _joined(room: Room, count: int) -> None:
    while len(room.viewers) < count:
        await asyncio.sleep(0.01)


async def _fan_out() -> tuple[Room, list[bool], list[bool], list[int]]:
    """The server's own web stack (uvicorn, the SSE route) over a room with no engine."""
    loop = asyncio.get_running_loop()
    options = RoomOptions(viewer_buffer_bytes=BOUND)
    server = StreamServer(None, StreamOptions(), ServerLimits(), Security(), rooms=options)  # type: ignore[arg-type]
    assert server.rooms is not None
    room = server.rooms.rooms["talk"] = Room("talk", options)
    web = web_server(build_app(server), server.limits, server.security)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    serving = asyncio.ensure_future(web.serve([sock]))
    while not web.started:
        await asyncio.sleep(0.01)
    # a viewer that never reads, with a small receive buffer
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.setblocking(False)
    await loop.sock_connect(stalled, ("127.0.0.1", port))
    await loop.sock_sendall(stalled, REQUEST)
    await _joined(room, 1)
    viewers = list(room.viewers)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(REQUEST)
    await _joined(room, 2)
    viewers += list(room.viewers - set(viewers))
    seqs: list[int] = []

    async def read() -> None:
        while len(seqs) < EVENTS:
            line = await reader.readline()
            if line.startswith(b"id: "):
                seqs.append(int(line[4:]))

    reading = asyncio.ensure_future(read())
    for number in range(1, EVENTS + 1):
        room.publish_records([_event(number)])
        await asyncio.sleep(0.001)
    await asyncio.wait_for(reading, 60)
    # before the connections close: in the room, and still open
    state = [[viewer in room.viewers, viewer.closing is None] for viewer in viewers]
    # the dropped viewer's connection, its unsent bytes however many, is let go within a
    # few seconds (a close would wait for them for ever)
    transport = getattr(viewers[0], "transport", None)

    def let_go() -> bool:
        return bool(transport and transport.is_closing() and not transport.get_write_buffer_size())

    for _ in range(int((CLOSE_FLUSH_S + 3) / 0.1)):
        if let_go():
            break
        await asyncio.sleep(0.1)
    state[0].append(let_go())
    writer.close()
    stalled.close()
    web.should_exit = True
    await serving
    server.scheduler.close()
    return room, state[0], state[1], seqs


def test_a_viewer_that_stops_reading_is_dropped_and_the_room_goes_on() -> None:
    room, stalled, reading, seqs = asyncio.run(_fan_out())
    assert stalled == [False, False, True]  # dropped, its connection aborted...
    assert reading == [True, True]  # ...the others not
    assert seqs == list(range(1, EVENTS + 1))  # every event once, in order
    assert room.seq == EVENTS
