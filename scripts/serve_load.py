#!/usr/bin/env python
"""A bounded load run against `streamasr serve` on this machine (127.0.0.1 only).

    python scripts/serve_load.py --clients 8 --utterances 3            # starts its own server
    python scripts/serve_load.py --url ws://127.0.0.1:6006/ws --clients 16 --realtime
    python scripts/serve_load.py --clients 16 --realtime --workers 2     # two processes

N clients connect at once; each streams bundled clips (utterance after utterance over one
connection) and measures, per utterance: the time from its end message to the summary
(the wait for the last final), the wall-clock first-token latency the server reports for
real-time sessions, and whether the text equals a run with one client. Then the server's
/metrics: audio and compute seconds, streams per batched step. Prints one JSON object.

Paced mode (`--ladder`) runs servers side by side, one after another (interleaved), each
started by you, with the same clients and clips:

    python scripts/serve_load.py --ladder 8,16,32,64 --duration-s 20 \
        --target streamasr,streamasr,PID1,ws://127.0.0.1:6006/ws \
        --target sherpa,sherpa-onnx,PID2,ws://127.0.0.1:6106

(`--target PROTOCOL,NAME,PID,URL`, repeatable: PROTOCOL streamasr or sherpa, PID may be
empty; the first target must speak streamasr's protocol.)

For each N and each server, N clients stream clips at live speed for `--duration-s`, one
connection per clip, back to back (starts spread over the first two seconds). The same
float32 samples in 100 ms messages go to both: to streamasr as `f32le` with its config and
end message, to a sherpa-onnx `streaming_server.py` as bare float32 messages then the text
"Done" (its protocol: JSON `{"text", "segment"}` after each decoded chunk, the last one
after "Done", then a normal close). Per session, on the client's clock: first-token
latency (first non-empty text, from speech onset; the onset per clip is the one
streamasr's detector finds in a first quiet run), final latency (end of the clip's audio
at live speed to the last result: a server that stops reading and so holds the client
back gains nothing), the client's lag behind live speed, and failures: lost finals (no
last result), dropped connections (closed abnormally once open), refused ones (handshake
refused or failed). With a PID, the server's CPU seconds per audio second (from /proc).
The largest N whose runs have no failure and a final latency p99 within `--final-limit-s`
is the capacity held in real time; `--overload` then runs every server at twice each
one's capacity.

Bounded: at most 256 clients, 20 utterances each, and --limit-s seconds in all; traffic goes
only to a loopback address.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import soundfile as sf

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout, installed or not

from streamasr.bench.report import cpu_model  # noqa: E402

CLIPS = sorted((REPO / "models" / "tiny-en" / "test_wavs").glob("*.wav"))
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_CLIENTS = 320  # 2x the bundled model's capacity on 2 cores (--overload), with room
# every server's connection limit, above any client count run here: the limit counts open
# sockets, and a client that reconnects the instant its last session closes may find that
# socket still counted, so a limit equal to the client count would measure admission
SERVER_CONNECTIONS = 2 * MAX_CLIENTS
MAX_UTTERANCES = 20
BLOCK_S = 0.1


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 4)


async def client(url: str, index: int, utterances: int, realtime: bool) -> list[dict[str, Any]]:
    from websockets.asyncio.client import connect

    rows = []
    async with connect(url, max_size=None) as ws:
        for number in range(utterances):
            path = CLIPS[(index + number) % len(CLIPS)]
            data, rate = sf.read(path, dtype="int16")
            await ws.send(json.dumps({"sample_rate": rate, "source": path.name,
                                      "realtime": realtime}))
            events: list[dict[str, Any]] = []

            async def read(collected: list[dict[str, Any]] = events) -> float:
                while True:
                    record = json.loads(await ws.recv())
                    collected.append(record)
                    if record["type"] == "summary":
                        return time.perf_counter()

            reader = asyncio.create_task(read())
            step = int(BLOCK_S * rate)
            started = time.perf_counter()
            for position in range(0, len(data), step):
                await ws.send(data[position : position + step].tobytes())
                if realtime:
                    due = started + (position + step) / rate
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
            ended = time.perf_counter()
            await ws.send(json.dumps({"type": "end"}))
            summary_at = await reader
            first = [e for e in events if e["type"] == "first_token"]
            rows.append({
                "clip": path.name,
                "text": events[-1]["text"],
                "audio_s": events[-1]["audio_s"],
                "end_to_summary_s": summary_at - ended,
                "first_token_wall_latency_s": first[0]["wall_latency_s"] if first else None,
            })
    return rows


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def read_metrics(http: str) -> str:
    with urllib.request.urlopen(http + "/metrics", timeout=30) as response:
        return str(response.read().decode())


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "streamasr", "serve", "--model", args.model, "--port", "0",
         "--max-connections", str(SERVER_CONNECTIONS), "--max-batch", str(args.max_batch),
         "--workers", str(args.workers)],
        cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        match = re.search(r"listening on (ws://127\.0\.0\.1:\d+/ws)", line)
        if match:
            return process, match.group(1)
    raise SystemExit("the server did not start")


async def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    baseline = {}
    for row in await client(url, 0, len(CLIPS), False):
        baseline[row["clip"]] = row["text"]
    http = url.replace("ws://", "http://").rsplit("/", 1)[0]
    before = await asyncio.to_thread(read_metrics, http)
    started = time.perf_counter()
    results = await asyncio.wait_for(
        asyncio.gather(
            *(client(url, index, args.utterances, args.realtime) for index in range(args.clients)),
            return_exceptions=True,
        ),
        args.limit_s,
    )
    wall = time.perf_counter() - started
    rows = [row for result in results if isinstance(result, list) for row in result]
    errors = [repr(result) for result in results if isinstance(result, BaseException)]
    waits = [row["end_to_summary_s"] for row in rows]
    firsts = [row["first_token_wall_latency_s"] for row in rows
              if row["first_token_wall_latency_s"] is not None]
    after = await asyncio.to_thread(read_metrics, http)

    def delta(name: str) -> float:
        return metric(after, name) - metric(before, name)

    steps = delta("streamasr_batch_streams_count")
    audio = sum(row["audio_s"] for row in rows)
    return {
        "clients": args.clients,
        "utterances": len(rows),
        "errors": errors,
        "realtime": args.realtime,
        "audio_s": round(audio, 2),
        "wall_s": round(wall, 2),
        "x_real_time": round(audio / wall, 2) if wall else None,
        "text_as_one_client": sum(row["text"] == baseline[row["clip"]] for row in rows),
        "end_to_summary_s": {"p50": percentile(waits, 0.5), "p90": percentile(waits, 0.9),
                             "max": percentile(waits, 1.0)},
        "first_token_wall_latency_s": {"p50": percentile(firsts, 0.5),
                                       "p90": percentile(firsts, 0.9)},
        "server_compute_s": round(delta("streamasr_compute_seconds_total"), 2),
        "server_audio_s": round(delta("streamasr_audio_seconds_total"), 2),
        "streams_per_step": round(delta("streamasr_batch_streams_sum") / steps, 2)
        if steps else None,
        "mean_end_to_summary_s": round(statistics.mean(waits), 3) if waits else None,
    }


# -- paced mode: streamasr and sherpa-onnx's streaming_server.py side by side ------------


@dataclass
class Target:
    """A server under test: its name, protocol, URL and (optionally) its process id."""

    name: str
    protocol: str  # "streamasr" or "sherpa"
    url: str
    pid: int | None


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of a process, its threads and its live child processes
    (`serve --workers N`'s workers), from /proc."""
    if pid is None:
        return None
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_seconds(child) or 0.0 for child in child_pids(pid))


def child_pids(pid: int) -> list[int]:
    """The live child processes of `pid` (from /proc; empty where the kernel does not list)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(child) for child in task.read_text().split()]
        except OSError:  # the thread ended meanwhile
            continue
    return found


def thread_cpu_seconds(pid: int | None) -> dict[int, float]:
    """CPU seconds per thread id (from /proc): where a server's CPU goes, its engine thread
    or its event loop (Python does not name its threads for the system)."""
    found: dict[int, float] = {}
    if pid is None:
        return found
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        found[int(task.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


def clip_samples() -> list[tuple[str, Any]]:
    return [(path.name, sf.read(path, dtype="float32")[0]) for path in CLIPS]


async def onsets(url: str) -> dict[str, float]:
    """Speech onset per clip: streamasr's detector, from a first quiet run (no pacing)."""
    from websockets.asyncio.client import connect

    found = {}
    async with connect(url, max_size=None) as ws:
        for name, samples in clip_samples():
            await ws.send(json.dumps({"sample_rate": 16000, "format": "f32le", "source": name}))
            await ws.send(samples.tobytes())
            await ws.send(json.dumps({"type": "end"}))
            while (record := json.loads(await ws.recv()))["type"] != "summary":
                if record["type"] == "first_token" and name not in found:
                    found[name] = record["onset_s"]
    return found


async def paced_session(target: Target, name: str, samples: Any, onset_s: float) -> dict:
    """One clip at live speed over one connection; what the client saw, on its clock."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidHandshake

    row: dict[str, Any] = {"clip": name, "refused": False, "dropped": False, "final": False,
                           "first_token_s": None, "final_s": None, "lag_s": 0.0, "text": ""}
    try:
        ws = await connect(target.url, max_size=None, open_timeout=30)
    except (InvalidHandshake, OSError, asyncio.TimeoutError) as exc:
        row["refused"] = True
        row["why"] = repr(exc)[:120]
        return row
    texts: dict[int, str] = {}
    done_at: list[float] = []
    started = 0.0

    async def read() -> None:
        async for message in ws:
            record = json.loads(message)
            now = time.perf_counter()
            text = record.get("text", "")
            if text and row["first_token_s"] is None and record.get("type") != "summary":
                row["first_token_s"] = now - started - onset_s
            if target.protocol == "sherpa":
                texts[record["segment"]] = text
                if done_at:
                    row["final_s"] = now - done_at[0]
            elif record["type"] == "summary":
                row["final_s"] = now - done_at[0]
                texts[0] = text
                return

    try:
        if target.protocol == "streamasr":
            await ws.send(json.dumps({"sample_rate": 16000, "format": "f32le",
                                      "source": name, "realtime": True}))
        reader = asyncio.create_task(read())
        step = int(BLOCK_S * 16000)
        started = time.perf_counter()
        for position in range(0, len(samples), step):
            due = started + position / 16000
            row["lag_s"] = max(row["lag_s"], time.perf_counter() - due)
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            await ws.send(samples[position : position + step].tobytes())
        spoken = started + len(samples) / 16000
        await asyncio.sleep(max(0.0, spoken - time.perf_counter()))
        # from the end of speech as a live source has it: a server that stops reading delays
        # the end message (client lag) and must not gain from it
        done_at.append(spoken)
        await ws.send("Done" if target.protocol == "sherpa" else json.dumps({"type": "end"}))
        await asyncio.wait_for(reader, 60)
        await ws.close()
    except (ConnectionClosed, asyncio.TimeoutError) as exc:
        row["why"] = repr(exc)[:120]
    code = ws.close_code
    if code == 1013 and not done_at and row["first_token_s"] is None:
        row["refused"] = True  # streamasr at --max-connections
    else:
        row["final"] = row["final_s"] is not None and code == 1000
        row["dropped"] = code != 1000
    row["text"] = " ".join(text for _, text in sorted(texts.items()) if text)
    return row


async def paced_run(target: Target, clients: int, duration_s: float,
                    onset: dict[str, float]) -> dict[str, Any]:
    """`clients` clients at live speed for `duration_s`, against one server."""
    clips = clip_samples()
    rows: list[dict[str, Any]] = []

    async def one(index: int) -> None:
        await asyncio.sleep(2.0 * index / clients)
        number = index
        while time.perf_counter() < end:
            name, samples = clips[number % len(clips)]
            rows.append(await paced_session(target, name, samples, onset[name]))
            number += 1

    load_before = os.getloadavg()[0]
    cpu_before = cpu_seconds(target.pid)
    threads_before = thread_cpu_seconds(target.pid)
    started = time.perf_counter()
    end = started + duration_s
    await asyncio.gather(*(one(index) for index in range(clients)))
    wall = time.perf_counter() - started
    cpu_after = cpu_seconds(target.pid)
    threads_after = thread_cpu_seconds(target.pid)
    firsts = [row["first_token_s"] for row in rows if row["first_token_s"] is not None]
    finals = [row["final_s"] for row in rows if row["final"]]
    audio_s = sum(len(samples) / 16000 for row in rows for name, samples in clips
                  if name == row["clip"] and row["final"])
    return {
        "server": target.name, "clients": clients, "sessions": len(rows),
        "first_token_s": {"p50": percentile(firsts, 0.5), "p99": percentile(firsts, 0.99)},
        "final_s": {"p50": percentile(finals, 0.5), "p99": percentile(finals, 0.99),
                    "max": percentile(finals, 1.0)},
        "lost_finals": sum(not row["final"] and not row["refused"] for row in rows),
        "dropped": sum(row["dropped"] for row in rows),
        "refused": sum(row["refused"] for row in rows),
        "client_lag_max_s": percentile([row["lag_s"] for row in rows], 1.0),
        "server_cpu_per_audio_s": round((cpu_after - cpu_before) / audio_s, 4)
        if cpu_before is not None and cpu_after is not None and audio_s else None,
        # per thread, busiest first (for both servers: the engine thread, the event loop)
        "server_cpu_per_audio_s_threads": sorted(
            (round((seconds - threads_before.get(tid, 0.0)) / audio_s, 4)
             for tid, seconds in threads_after.items() if audio_s), reverse=True)[:4],
        "wall_s": round(wall, 1),
        "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "why": sorted({row["why"] for row in rows if "why" in row})[:3],
        "texts_per_clip": {name: len({row["text"] for row in rows
                                      if row["clip"] == name and row["final"]})
                           for name, _ in clips},
    }


def holds(run: dict[str, Any], final_limit_s: float) -> bool:
    p99 = run["final_s"]["p99"]
    return (not run["lost_finals"] and not run["dropped"] and not run["refused"]
            and p99 is not None and p99 <= final_limit_s)


async def compare(args: argparse.Namespace, targets: list[Target]) -> dict[str, Any]:
    onset = await onsets(targets[0].url)
    ladder = [int(n) for n in args.ladder.split(",")]
    runs = []
    for repeat in range(args.repeats):
        for step, clients in enumerate(ladder):
            order = targets if (repeat + step) % 2 == 0 else targets[::-1]  # interleaved
            for target in order:
                run = await paced_run(target, clients, args.duration_s, onset)
                print(json.dumps(run), file=sys.stderr, flush=True)
                runs.append(run)
    capacity = {}
    for target in targets:
        held = [clients for clients in ladder
                if all(holds(run, args.final_limit_s) for run in runs
                       if run["server"] == target.name and run["clients"] == clients)]
        capacity[target.name] = max(held, default=0)
    if args.overload:  # every server at twice each one's capacity: what fails, and how
        for clients in sorted({min(2 * held, MAX_CLIENTS) for held in capacity.values()
                               if held}):
            for target in targets:
                run = await paced_run(target, clients, args.duration_s, onset)
                run["overload"] = True
                print(json.dumps(run), file=sys.stderr, flush=True)
                runs.append(run)
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "onset_s": onset,
            "final_limit_s": args.final_limit_s, "duration_s": args.duration_s,
            "capacity": capacity, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="ws://127.0.0.1:PORT/ws; default: start a server")
    parser.add_argument("--model", default="tiny-en", help="model of the server started here")
    parser.add_argument("--max-batch", type=int, default=32, help="of the server started here")
    parser.add_argument("--workers", type=int, default=1, help="of the server started here")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--utterances", type=int, default=3, help="per client")
    parser.add_argument("--realtime", action="store_true", help="send at live speed")
    parser.add_argument("--limit-s", type=float, default=120.0, help="the whole run, at most")
    paced = parser.add_argument_group("paced mode (side by side)")
    paced.add_argument("--ladder", help="client counts, e.g. 8,16,32: runs the paced mode")
    paced.add_argument("--duration-s", type=float, default=20.0, help="each paced run")
    paced.add_argument("--repeats", type=int, default=1, help="passes over the ladder")
    paced.add_argument("--target", action="append", default=[],
                       help="PROTOCOL,NAME,PID,URL (repeatable): a server to run side by side")
    paced.add_argument("--overload", action="store_true",
                       help="then run every server at twice each one's capacity")
    paced.add_argument("--final-limit-s", type=float, default=1.0,
                       help="held in real time: final latency p99 at most this")
    args = parser.parse_args()
    if not 1 <= args.clients <= MAX_CLIENTS:
        parser.error(f"--clients: 1 to {MAX_CLIENTS}")
    if not 1 <= args.utterances <= MAX_UTTERANCES:
        parser.error(f"--utterances: 1 to {MAX_UTTERANCES}")
    if not 0 < args.limit_s <= 600:
        parser.error("--limit-s: more than 0, at most 600")
    targets = []
    for text in args.target:
        parts = text.split(",", 3)
        if len(parts) != 4 or parts[0] not in ("streamasr", "sherpa") or not (
                parts[2] == "" or parts[2].isdigit()):
            parser.error(f"--target {text!r}: PROTOCOL,NAME,PID,URL with PROTOCOL streamasr "
                         "or sherpa, e.g. sherpa,sherpa-onnx,1234,ws://127.0.0.1:6106")
        pid = int(parts[2]) if parts[2] else None
        targets.append(Target(parts[1], parts[0], parts[3], pid))
    if targets and targets[0].protocol != "streamasr":
        parser.error("--target: the first one speaks streamasr (it finds the clips' onsets)")
    for url in (args.url, *(target.url for target in targets)):
        if url is not None and urlparse(url).hostname not in LOOPBACK:
            parser.error("--url: load runs go to this machine only (127.0.0.1, localhost, ::1)")
    if args.ladder is not None:
        try:
            ladder = [int(n) for n in args.ladder.split(",")]
        except ValueError:
            parser.error("--ladder: client counts separated by commas, e.g. 8,16,32")
        if not 1 <= len(ladder) <= 12 or not all(1 <= n <= MAX_CLIENTS for n in ladder):
            parser.error(f"--ladder: 1 to 12 counts, each 1 to {MAX_CLIENTS}")
        if not 1 <= args.duration_s <= 120 or not 1 <= args.repeats <= 5:
            parser.error("--duration-s: 1 to 120; --repeats: 1 to 5")
    process = None
    url = args.url
    if url is None and not (args.ladder and targets):
        process, url = start_server(args)
    try:
        if args.ladder is None:
            print(json.dumps(asyncio.run(run(args, url)), indent=2))
            return
        if not targets:
            targets = [Target("streamasr", "streamasr", url, process.pid if process else None)]
        print(json.dumps(asyncio.run(compare(args, targets)), indent=2))
    finally:
        if process is not None:
            process.terminate()
            process.wait(60)


if __name__ == "__main__":
    main()
