"""A room's fan-out over real TCP connections on 127.0.0.1, in one process: a viewer that
stops reading is dropped once its unsent bytes pass the bound, and the room and its other
viewers go on, every event once and in order.

(tests/test_serve_rooms.py runs rooms on a real server; a reader slow enough to fill the
bound there would take minutes of real talk, so the bound is met here with large events.)
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

from streamasr.server.room_feeds import SseViewer
from streamasr.server.rooms import Room, RoomOptions

BOUND = 64 * 1024
EVENT_BYTES = 16 * 1024
EVENTS = 200


class _Accepted(asyncio.Protocol):
    """Holds a server-side transport until a viewer takes it over."""

    def __init__(self, found: asyncio.Queue[Any]) -> None:
        self.found = found

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.found.put_nowait(transport)


def _line(number: int) -> str:
    return json.dumps(
        {"source": "talk", "type": "partial", "seq": number, "audio_s": 0.1 * number,
         "wall_s": 0.1 * number, "segment": 0, "text": "word " * (EVENT_BYTES // 5)}
    )  # fmt: skip


async def _fan_out() -> tuple[Room, list[bool], list[bool], list[int]]:
    loop = asyncio.get_running_loop()
    found: asyncio.Queue[Any] = asyncio.Queue()
    server = await loop.create_server(lambda: _Accepted(found), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    room = Room("talk", RoomOptions(viewer_buffer_bytes=BOUND))
    viewers = []
    # a viewer that never reads, with a small receive buffer
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.setblocking(False)
    await loop.sock_connect(stalled, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(2):
        transport = await found.get()
        viewer = SseViewer(transport, room, BOUND)
        transport.set_protocol(viewer)
        room.join(viewer, 0)
        viewers.append(viewer)
    seqs: list[int] = []

    async def read() -> None:
        while len(seqs) < EVENTS:
            line = await reader.readline()
            if line.startswith(b"id: "):
                seqs.append(int(line[4:]))

    reading = asyncio.ensure_future(read())
    for number in range(1, EVENTS + 1):
        room.publish([_line(number)])
        await asyncio.sleep(0.001)
    await asyncio.wait_for(reading, 60)
    # before the connections close: in the room, and still open
    state = [[viewer in room.viewers, not viewer.done] for viewer in viewers]
    writer.close()
    stalled.close()
    server.close()
    return room, state[0], state[1], seqs


def test_a_viewer_that_stops_reading_is_dropped_and_the_room_goes_on() -> None:
    room, stalled, reading, seqs = asyncio.run(_fan_out())
    assert stalled == [False, False]  # dropped...
    assert reading == [True, True]  # ...the others not
    assert seqs == list(range(1, EVENTS + 1))  # every event once, in order
    assert room.seq == EVENTS
