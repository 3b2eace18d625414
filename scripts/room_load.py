#!/usr/bin/env python
"""Fan-out load on `streamasr serve` rooms: 1 publisher, many readers (127.0.0.1 only).

    python scripts/room_load.py --viewers 500 --duration-s 30        # one server, no Redis
    python scripts/room_load.py --viewers 2000 --servers 2 --redis --beside 500
    python scripts/room_load.py --viewers 2000 --workers 2 --redis   # one `serve --workers 2`

Starts its own servers (and with --redis its own redis-server, Debian's, on a free port in
a temporary folder, with its append-only file synced every second), then runs the same talk
twice: the bundled clips streamed at live speed (100 ms messages) for --duration-s, one
utterance per clip, by a publisher to a room on the first server, first with no reader (the
baseline), then with --viewers readers (WebSocket, and a --sse-share of Server-Sent Events)
spread evenly over the servers (over the workers: as the kernel hands out connections),
from --procs client processes so the clients' own Python does not all fall on one core.
With --beside N, the same run follows with N readers of one server and in-process rooms.

The servers run with STREAMASR_ROOM_CLOCK=1: each event a reader gets carries the server's
monotonic clock when the engine's step handed it over (`server_monotonic_s`; the machine's
CLOCK_MONOTONIC, the same in every process here). A reader's lag is its receipt on that
clock minus that reading: through Redis, the publisher's server, Redis, the reader's
server and the reader's own process, whose scheduling delays on a loaded machine show.

Per run: lag of finals and of partials (p50/p90/p99/max; finals also per feed and server,
and per event the first reader's: the way to the fan-out); events lost, repeated and
reordered (by room_seq) over all readers, and readers closed early; per server process its
readers (its open connections), CPU seconds of the reader run beyond the baseline (the
talk's own, in the process holding the publisher) per reader per minute of talk, resident
memory before and after the readers connected (per reader); Redis's CPU seconds and memory
likewise; the reader processes' own CPU seconds (they share the machine's cores with the
servers). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from redis_local import RedisProcess, free_port  # noqa: E402
from room_readers import decoded, open_reader, read_to_end  # noqa: E402
from serve_load import CLIPS, REPO, child_pids, cpu_model, cpu_seconds, percentile  # noqa: E402

from streamasr.server.room_broker import CLOCK_FIELD, ROOM_CLOCK_ENV  # noqa: E402

ROOM = "load"
BLOCK_S = 0.1
MAX_VIEWERS = 4000
CONNECT_AT_ONCE = 50


@dataclass(frozen=True)
class Layout:
    """Where the room lives: Redis or in-process, over how many servers and workers."""

    redis: bool
    servers: int = 1
    workers: int = 1

    def name(self) -> str:
        where = "Redis" if self.redis else "in-process rooms"
        workers = f", --workers {self.workers}" if self.workers > 1 else ""
        return f"{self.servers} server(s){workers}, {where}"


@dataclass
class Server:
    """One `streamasr serve` the script started; its stderr is read so it never blocks."""

    process: subprocess.Popen[str]
    port: int
    workers: int
    tail: list[str] = field(default_factory=list)

    def pids(self) -> list[int]:
        """The processes serving (the workers with --workers, else the server itself)."""
        return sorted(child_pids(self.process.pid)) if self.workers > 1 else [self.process.pid]


def rss_kib(pid: int) -> int:
    match = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    return int(match.group(1)) if match else 0


def own_cpu_seconds(pid: int) -> float:
    return cpu_seconds(pid) or 0.0


def connections(pid: int, port: int) -> int:
    """Established TCP connections that process `pid` holds on local `port` (/proc)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        parts = line.split()
        if int(parts[1].split(":")[1], 16) == port and parts[3] == "01":
            inodes.add(parts[9])
    held = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            held += 1
    return held


def start_server(model: str, viewers: int, layout: Layout, rooms_url: str | None) -> Server:
    command = [sys.executable, "-m", "streamasr", "serve", "--model", model, "--port", "0",
               "--host", "127.0.0.1", "--max-viewers", str(viewers),
               "--workers", str(layout.workers)]  # fmt: skip
    if rooms_url is not None:
        command += ["--rooms", rooms_url]
    process = subprocess.Popen(
        command, cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        env={**os.environ, ROOM_CLOCK_ENV: "1"},
    )  # fmt: skip
    assert process.stderr is not None
    tail: list[str] = []
    for line in process.stderr:
        tail.append(line)
        match = re.search(r"listening on ws://127\.0\.0\.1:(\d+)/ws", line)
        if match:
            server = Server(process, int(match.group(1)), layout.workers, tail)
            threading.Thread(target=_drain, args=(process, tail), daemon=True).start()
            for _ in range(200):  # the workers are forked before the line; wait to see them
                if len(server.pids()) == layout.workers:
                    return server
                time.sleep(0.05)
            break
    process.kill()
    raise SystemExit("the server did not start:\n" + "".join(tail[-20:]))


def _drain(process: subprocess.Popen[str], tail: list[str]) -> None:
    assert process.stderr is not None
    for line in process.stderr:
        tail.append(line)
        del tail[:-50]


async def publish(port: int, duration_s: float, ready: Any, run: str) -> dict[tuple, float]:
    """Stream clips at live speed to the room; when each partial/final came back."""
    from websockets.asyncio.client import connect

    seen: dict[tuple, float] = {}
    clips = [(path.name, sf.read(path, dtype="int16")) for path in CLIPS]
    async with connect(f"ws://127.0.0.1:{port}/ws", max_size=None) as ws:
        started = time.monotonic()
        number = 0
        while time.monotonic() - started < duration_s:
            name, (data, rate) = clips[number % len(clips)]
            source = f"{run}-{number}-{name}"
            await ws.send(json.dumps({"sample_rate": rate, "source": source, "room": ROOM,
                                      "room_source": True, "realtime": True}))  # fmt: skip
            if number == 0:
                await asyncio.to_thread(ready)  # the room exists: readers may come
            number += 1

            async def read() -> None:
                while True:
                    record = json.loads(await ws.recv())
                    if record["type"] in ("partial", "final"):
                        seen[(record["source"], record["seq"], record["type"])] = time.monotonic()
                    if record["type"] == "summary":
                        return

            reader = asyncio.create_task(read())
            step = int(BLOCK_S * rate)
            begun = time.monotonic()
            for position in range(0, len(data), step):
                await ws.send(data[position : position + step].tobytes())
                due = begun + (position + step) / rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
            await ws.send(json.dumps({"type": "end"}))
            await reader
    return seen


def _row(record: dict[str, Any], now: float) -> tuple:
    return (record["source"], record["seq"], record["type"], record["room_seq"],
            now, record.get(CLOCK_FIELD))  # fmt: skip


async def view_all(
    ports: list[int], offset: int, count: int, sse_share: float, connected: Any
) -> tuple[list[dict], float]:
    """`count` readers of the room until its publisher leaves, reader i on port
    ports[(offset + i) % len(ports)]; per reader what came when, and this process's CPU
    seconds from the moment all had connected to the talk's end (room_readers.py: readers
    that stamp each event as its bytes arrive and decode the JSON after the talk)."""
    gate = asyncio.Semaphore(CONNECT_AT_ONCE)
    sse = round(count * sse_share)
    kinds = ["sse" if i < sse else "ws" for i in range(count)]
    opened = await asyncio.gather(*(
        open_reader(kind, ports[(offset + i) % len(ports)], ROOM, gate)
        for i, kind in enumerate(kinds)
    ))  # fmt: skip
    connected.set()
    cpu_start = time.process_time()
    await asyncio.gather(*(read_to_end(reader) for reader in opened))
    cpu_s = time.process_time() - cpu_start
    readers = []
    for i, (kind, reader) in enumerate(zip(kinds, opened, strict=True)):
        records, closed = decoded(reader)
        got = [_row(record, at) for at, record in records if "room_seq" in record]
        readers.append({"kind": kind, "port": ports[(offset + i) % len(ports)], "events": got,
                        "closed": closed})  # fmt: skip
    return readers, cpu_s


def viewer_process(
    ports: list[int], offset: int, count: int, sse_share: float, connected: Any, out: Any
) -> None:
    # the readers run on uvloop where it is installed (the serve extra): the load generator's
    # own CPU shares the machine's cores with the servers it measures
    try:
        from uvloop import run
    except ImportError:
        run = asyncio.run
    out.put(run(view_all(ports, offset, count, sse_share, connected)))


def run_layout(layout: Layout, viewers: int, args: argparse.Namespace) -> dict[str, Any]:
    """Start the layout's servers (and Redis), run the baseline and the readers' talk."""
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="room-load-") as folder:
        redis = RedisProcess(Path(folder), free_port(), fsync="everysec") if layout.redis else None
        if redis is not None:
            redis.start()
        servers: list[Server] = []
        try:
            url = redis.url if redis is not None else None
            servers = [start_server(args.model, viewers, layout, url)
                       for _ in range(layout.servers)]  # fmt: skip
            result = measure(layout, viewers, args, servers, redis)
        finally:
            for server in servers:
                server.process.terminate()
            for server in servers:
                server.process.wait(60)
            if redis is not None:
                redis.stop()
    if result["readers_closed_early"]:  # what the servers said, to stderr
        for server in servers:
            sys.stderr.write(f"-- server on port {server.port}:\n" + "".join(server.tail[-30:]))
    result["load_average_1_5_15"] = {
        "start": [round(x, 2) for x in load_start],
        "end": [round(x, 2) for x in os.getloadavg()],
    }
    return result


def measure(
    layout: Layout, viewers: int, args: argparse.Namespace, servers: list[Server],
    redis: RedisProcess | None,
) -> dict[str, Any]:  # fmt: skip
    pids = [(server, pid) for server in servers for pid in server.pids()]
    redis_pid = redis.process.pid if redis is not None and redis.process else None

    def cpu() -> dict[int, float]:
        found = {pid: own_cpu_seconds(pid) for _, pid in pids}
        if redis_pid is not None:
            found[redis_pid] = own_cpu_seconds(redis_pid)
        return found

    ports = [server.port for server in servers]
    state: dict[str, Any] = {}

    def publisher_at() -> int:
        """The server process holding the publisher's connection (--workers: any of them)."""
        return next(pid for server, pid in pids if connections(pid, server.port))

    def base_ready() -> None:
        state["base_publisher"] = publisher_at()

    cpu0 = cpu()
    asyncio.run(publish(ports[0], args.duration_s, base_ready, "base"))
    cpu1 = cpu()
    rss_before = {pid: rss_kib(pid) for _, pid in pids}
    redis_before = redis.info("memory") if redis is not None else {}
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    shares = [viewers // args.procs + (i < viewers % args.procs) for i in range(args.procs)]
    events = [ctx.Event() for _ in shares]
    children: list[Any] = []

    def ready() -> None:
        state["held"] = {pid: connections(pid, server.port) for server, pid in pids}
        state["publisher"] = publisher_at()
        offset = 0
        for share, event in zip(shares, events, strict=True):
            if share:
                child = ctx.Process(
                    target=viewer_process, args=(ports, offset, share, args.sse_share, event, out)
                )
                child.start()
                children.append(child)
            offset += share
        for share, event in zip(shares, events, strict=True):
            if share and not event.wait(180):
                raise SystemExit("readers did not connect within 180 s")
        state["rss"] = {pid: rss_kib(pid) for _, pid in pids}
        state["readers"] = {pid: connections(pid, server.port) - state["held"][pid]
                            for server, pid in pids}  # fmt: skip
        state["cpu"] = cpu()

    seen = asyncio.run(publish(ports[0], args.duration_s, ready, "room"))
    cpu2 = cpu()
    redis_after = redis.info("memory") if redis is not None else {}
    reported = [out.get(timeout=180) for _ in children]
    readers = [row for rows, _ in reported for row in rows]
    for child in children:
        child.join(30)
    minutes = args.duration_s / 60
    # the baseline of a process: the talk's own CPU (the engine) where the publisher is now,
    # else an idle process's (with --workers the publisher may reach another worker)
    publishing_base = cpu1[state["base_publisher"]] - cpu0[state["base_publisher"]]
    idle = [cpu1[pid] - cpu0[pid] for _, pid in pids if pid != state["base_publisher"]]
    idle_base = sum(idle) / len(idle) if idle else 0.0
    processes = []
    for server, pid in pids:
        held = state["readers"][pid]
        base = publishing_base if pid == state["publisher"] else idle_base
        run = cpu2[pid] - state["cpu"][pid]
        processes.append({
            "port": server.port, "pid": pid, "readers": held,
            "publisher": pid == state["publisher"],
            "cpu_s": {"baseline": round(base, 2), "with_readers": round(run, 2),
                      "per_reader_per_talk_minute_ms":
                          round(1000 * (run - base) / held / minutes, 2) if held else None},
            "rss_kib": {"before_readers": rss_before[pid], "with_readers": state["rss"][pid],
                        "per_reader": round((state["rss"][pid] - rss_before[pid]) / held, 1)
                        if held else None},
        })  # fmt: skip
    result: dict[str, Any] = {
        "layout": layout.name(),
        "readers": len(readers),
        "sse_readers": sum(r["kind"] == "sse" for r in readers),
        "talk_s": args.duration_s,
        **deliveries(seen, readers),
        "server_processes": processes,
        "client_cpu_s": round(sum(cpu for _, cpu in reported), 2),
    }
    if redis is not None and redis_pid is not None:
        base, run = cpu1[redis_pid] - cpu0[redis_pid], cpu2[redis_pid] - state["cpu"][redis_pid]
        result["redis"] = {
            "cpu_s": {"baseline": round(base, 2), "with_readers": round(run, 2)},
            "used_memory_kib": {"before_readers": int(redis_before["used_memory"]) // 1024,
                                "after": int(redis_after["used_memory"]) // 1024},
            "rss_kib": {"before_readers": int(redis_before["used_memory_rss"]) // 1024,
                        "after": int(redis_after["used_memory_rss"]) // 1024},
        }  # fmt: skip
    return result


def deliveries(seen: dict[tuple, float], readers: list[dict]) -> dict[str, Any]:
    """Lags from the server's clock; what each reader lost, got twice or out of order."""
    final_lags: list[float] = []
    partial_lags: list[float] = []
    by_reader: dict[str, list[float]] = {}  # finals' lag per feed and server
    first: dict[tuple, float] = {}  # per event, the first reader's lag
    lost = repeated = reordered = readers_lost = closed = 0
    reasons: Counter[str] = Counter()
    for reader in readers:
        if reader["closed"] is not None:
            closed += 1
            reasons[f"{reader['kind']}: {reader['closed'][:120]}"] += 1
        seqs = [row[3] for row in reader["events"]]
        repeated += len(seqs) - len(set(seqs))
        reordered += sum(b < a for a, b in zip(seqs, seqs[1:], strict=False))
        got = {row[:3] for row in reader["events"]}
        missing = sum(key not in got for key in seen)
        lost += missing
        readers_lost += missing > 0
        group = by_reader.setdefault(f"{reader['kind']} on port {reader['port']}", [])
        for source, seq, kind, _, at, stamp in reader["events"]:
            key = (source, seq, kind)
            if key in seen and stamp is not None:
                (final_lags if kind == "final" else partial_lags).append(at - stamp)
                first[key] = min(first.get(key, at - stamp), at - stamp)
                if kind == "final":
                    group.append(at - stamp)
    if not final_lags:
        raise SystemExit(f"no final carried {CLOCK_FIELD}: is the server older than the script?")
    return {
        "events_published": len(seen),
        "finals_published": sum(key[2] == "final" for key in seen),
        "deliveries": len(final_lags) + len(partial_lags),
        "final_lag_ms": _spread(final_lags),
        "partial_lag_ms": _spread(partial_lags),
        "final_lag_ms_by_reader": {name: _spread(lags) for name, lags in sorted(by_reader.items())},
        "first_reader_lag_ms": _spread(list(first.values())),
        "events_lost": lost, "events_repeated": repeated, "events_reordered": reordered,
        "readers_that_lost_events": readers_lost, "readers_closed_early": closed,
        "why_closed_early": dict(reasons.most_common(5)),
    }  # fmt: skip


def _spread(values: list[float]) -> dict[str, float | None]:
    shares = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
    found = {name: _ms(percentile(values, share)) for name, share in shares.items()}
    return {**found, "max": _ms(max(values, default=None))}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--viewers", type=int, default=500, help="readers in all")
    parser.add_argument(
        "--redis",
        action="store_true",
        help="rooms in a Redis the script starts (serve --rooms redis://)",
    )
    parser.add_argument("--servers", type=int, default=1, help="server processes (--redis)")
    parser.add_argument("--workers", type=int, default=1, help="serve --workers N (--redis)")
    parser.add_argument(
        "--beside",
        type=int,
        default=0,
        metavar="N",
        help="then N readers of one server with in-process rooms",
    )
    parser.add_argument("--sse-share", type=float, default=0.5)
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--procs", type=int, default=4, help="reader client processes")
    parser.add_argument("--model", default="tiny-en")
    args = parser.parse_args()  # fmt: skip
    if not 1 <= args.viewers <= MAX_VIEWERS or not 0 <= args.beside <= MAX_VIEWERS:
        raise SystemExit(f"--viewers 1-{MAX_VIEWERS}, --beside 0-{MAX_VIEWERS}")
    if not 0 <= args.sse_share <= 1 or not 1 <= args.servers <= 4 or not 1 <= args.workers <= 4:
        raise SystemExit("--sse-share 0-1, --servers 1-4, --workers 1-4")
    if (args.servers > 1 or args.workers > 1) and not args.redis:
        raise SystemExit("rooms span server processes only through Redis: add --redis")
    runs = [run_layout(Layout(args.redis, args.servers, args.workers), args.viewers, args)]
    if args.beside:
        runs.append(run_layout(Layout(False), args.beside, args))
    print(json.dumps({"runs": runs, "client_procs": args.procs, "cpus": os.cpu_count(),
                      "cpu_model": cpu_model()}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
