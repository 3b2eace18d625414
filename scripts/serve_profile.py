#!/usr/bin/env python
"""Where a server's CPU goes: py-spy profiles of `streamasr serve` and of sherpa-onnx's
`streaming_server.py` under the same paced load, sorted into buckets.

    python scripts/serve_profile.py --sherpa-onnx PATH_TO_SHERPA_ONNX_GIT --clients 96 \
        --asyncio-loop --out serve_profile.json

Each server runs alone, one after another, with serve_side_by_side's commands and engine
settings (model folder, 1 engine thread, batches of up to 32 streams, 5 ms wait):
`streamasr serve --workers 2` (the capacity setting), sherpa-onnx's server at
`--nn-pool-size 2` (its best on two cores), and with `--asyncio-loop` also `streamasr serve`
under STREAMASR_LOOP=asyncio (asyncio's loop instead of uvloop's). Against each,
serve_load's paced mode (N clients at live speed, 100 ms float32 messages, one connection
per clip, `--duration-s`) runs twice: once plain, for the CPU seconds per audio second and
latencies undisturbed, and once while `py-spy record --native --format raw` samples the
server for `--profile-s` from the middle of the run. For streamasr, py-spy follows the
parent with `--subprocesses`, so every worker is sampled; the parent only waits.

py-spy stops the process for each sample and unwinds every thread, so the profiled run is
slower than the plain one: its shares say where the work is, the plain run what it costs.

A sample of a thread is "idle" when its innermost named frame waits (epoll, a condition
variable, a lock or the GIL: pool threads waiting for work, an event loop waiting for
sockets); the rest are "busy". Each busy sample goes to the bucket of its innermost frame
that matches one (scanning from the leaf up), so a JSON encoding inside an event-building
function counts as events, and the engine's work as the engine wherever it was called from.
Inside `decode_streams` (the binding is stripped, so sherpa-onnx's own functions have no
names), the onnxruntime runs are split by their call site: the busiest site is the encoder,
the others the decoder and joiner, and samples outside any run are sherpa-onnx's own C++
around them (batching states, greedy search). sherpa-onnx's server calls `accept_waveform`
from its own Python without a Python-level wrapper, so its lines that do are read from its
source. "server / engine" is busy samples over engine samples (encoder, decoder, joiner and
features): what the whole server spends per unit of engine work.

Writes one JSON record (`--out`: CPU model, load averages, versions, commands, both runs'
serve_load results, bucket counts, the top stacks of "other") and prints a markdown table.
`--classify RAW` only sorts a kept raw profile (`--raw-dir`) and prints its buckets.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import serve_load  # scripts/, this script's folder
from serve_side_by_side import (
    extract_sherpa_server,
    free_port,
    model_files,
    serve_command,
    sherpa_command,
    shown,
    started,
)

from streamasr.bench.report import cpu_model  # importable once serve_load set the path

REPO = Path(__file__).resolve().parent.parent
SHERPA_SOURCE = "streaming_server.py"

# -- buckets -----------------------------------------------------------------------------

ENGINE_RUNS = "engine: encoder, decoder, joiner (decode_streams)"
FEATURES = "engine: features (accept_waveform)"
OTHER = "other"

#: (bucket, substrings of a frame). A frame is "function (file:line)" for Python and
#: "symbol (library)" for native code; the first bucket with a matching substring wins.
BUCKETS: list[tuple[str, tuple[str, ...]]] = [
    (ENGINE_RUNS, ("OnlineRecognizer.decode_streams (", "OnlineRecognizer.decode_stream (")),
    (FEATURES, ("accept_waveform", "SherpaStream.accept (")),
    ("per step: read result (get_result)", (
        "OnlineRecognizer.get_result", "SherpaStream.hypothesis (")),
    ("per step: events (partial, final, endpointing, JSON)", (
        "StreamSession.after_step", "StreamSession._event", "StreamSession._final",
        "StreamSession._partial", "StreamSession._hypothesis", "StreamSession._endpoint",
        "after_engine_step (", "Endpoint", "WireEncoder", "_Records.", "JsonlRenderer",
        "jsonl_line", "Event.to_dict", "Final.__post_init__", "Partial.__post_init__",
        "words_of (", "Scheduler._render", "Connection.deliver_records", "dumps (json",
        "JSONEncoder", "OnlineRecognizer.is_endpoint", "OnlineRecognizer.reset",
        "SherpaStream.reset", "SpacedText", "shared_prefix_len")),
    ("WebSocket compression (permessage-deflate)", (
        "PerMessageDeflate", "zlib_Decompress", "zlib_Compress", "inflate (", "deflate (")),
    ("sending", (
        "WebSocket.send (starlette", "WebSocket.send_text", "WebSocketsSansIOProtocol.send (",
        "WebSocketStream.send (", "Connection._send_loop", "Connection.deliver (",
        "Scheduler._send", "ClientSession.open.<locals>.deliver",
        "Connection.send (websockets", "Connection.send_context", "Connection.send_data",
        "_SelectorSocketTransport.write", "sock_send", "UVStream_write", "UVStream__exec_write",
        "UVStream__try_write", "uv__write", "uv_try_write", "sender (")),
    ("per message: onset detector", ("OnsetDetector",)),
    ("per message: decode, convert, feed", (
        "decode_frame (", "ClientSession.add_audio", "Scheduler.add_audio", "Scheduler._prepare",
        "Scheduler._due_or_closed", "StreamSession.accept (", "StreamSession._to_engine",
        "Connection._serve", "frombuffer")),
    ("per message: WebSocket receive", (
        "data_received", "_read_ready", "Frame.parse", "Protocol.parse", "Protocol.receive_data",
        "Protocol.recv_frame", "ServerProtocol.parse", "WebSocketsSansIOProtocol.receive",
        "WebSocketsSansIOProtocol.handle_", "WebSocketStream.recv", "WebSocket.receive",
        "Connection.recv (websockets", "Connection._receive", "recv_audio_samples",
        "sock_recv", "recv (", "uv__read", "_uv_stream_on_read", "pause_reading",
        "resume_reading", "_add_reader", "_remove_reader", "StreamReader.", "apply_mask",
        "Assembler.", "send_receive_event_to_app")),
    ("per session: open, close (handshake, stream, logging)", (
        "create_stream", "StreamSession.__init__", "StreamSession.close", "StreamSession.end_input",
        "Scheduler.open", "Scheduler._close", "ClientSession.open (", "admit (",
        "WebSocket.accept", "handshake", "process_request", "ServerProtocol.accept",
        "ServerProtocol.send_response", "accept_key", "handle_websocket_upgrade",
        "handle_connect (", "connection_made", "connection_lost", "Connection.close",
        "HttpToolsProtocol", "StreamingServer.handle_connection (", "Logger.", "input_finished",
        "Connection._finish_utterance", "Connection._flush")),
    ("metrics (prometheus)", ("prometheus_client",)),
    ("step scheduling (executor, thread wake-ups)", (
        "run_in_executor", "call_soon_threadsafe", "_write_to_self", "_chain_future",
        "_call_set_state", "Future.set_result (concurrent", "Future._invoke_callbacks",
        "Condition.notify", "_WorkItem.run", "_worker (concurrent", "Scheduler.", "engine_step (",
        "SherpaRecognizer.decode_batch", "OnlineRecognizer.is_ready", "SherpaStream.ready",
        "stream_consumer_task", "compute_and_decode", "_read_from_self", "_process_self_data",
        "uv_async_send", "uv__async", "UVAsync", "handler_async", "pthread_cond_signal",
        "PyThread_release_lock")),
    ("garbage collection", ("gc_collect", "collect (gc")),
    ("event loop", (
        "_run_once", "Handle._run", "run_forever", "uv_run", "uv__io_poll", "uv__run_",
        "Loop__on_idle", "loop_cb_idle", "Handle__run", "task_step", "TaskStepMethWrapper",
        "task_wakeup", "Loop__run", "EpollSelector.select", "select_epoll_poll", "TimerHandle",
        "Loop_call_later", "uv__hrtime", "sleep (asyncio", "Task.__step", "Task.__wakeup")),
]
BUCKET_NAMES = [name for name, _ in BUCKETS] + [OTHER]
ENGINE_SPLIT = ("encoder (busiest onnxruntime call site)",
                "decoder, joiner (other onnxruntime call sites)",
                "onnxruntime, call site lost (unwinding stopped in a kernel)",
                "sherpa-onnx's C++ around the runs")

#: where a thread waits, not works (the innermost frame with a name)
WAITS = ("epoll_wait", "epoll_pwait", "select", "poll", "ppoll", "pthread_cond_wait",
         "pthread_cond_timedwait", "pthread_cond_clockwait", "__lll_lock_wait",
         "__lll_lock_wait_private", "sem_wait", "sem_timedwait", "sem_clockwait",
         "PyThread_acquire_lock_timed", "nanosleep", "clock_nanosleep", "syscall")
WAITS_PY = ("EpollSelector.select (", "Condition.wait (", "Event.wait (",
            "Thread._wait_for_tstate_lock (", "Queue.get (queue")
ADDRESS = re.compile(r"^0x[0-9a-f]+ \(")


def source_rules(path: Path) -> dict[str, str]:
    """Frame suffixes like "(streaming_server.py:749)" for the lines of sherpa-onnx's server
    that call the engine's unwrapped C++ (no Python frame of their own), and their bucket."""
    rules = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if "accept_waveform(" in line:
            rules[f"({path.name}:{number})"] = FEATURES
        elif "np.frombuffer(" in line or "np.zeros(" in line:
            rules[f"({path.name}:{number})"] = "per message: decode, convert, feed"
    return rules


def name_of(frame: str) -> str:
    return frame.split(" (", 1)[0]


def idle_kind(frames: list[str]) -> str | None:
    """Why a sample is idle, or None when its thread was working."""
    named = [frame for frame in frames if not ADDRESS.match(frame)]
    if not named:
        return None
    inner = name_of(named[-1])
    python_wait = ".py:" in named[-1] and named[-1].startswith(WAITS_PY)
    if inner not in WAITS and not inner.startswith("__futex") and not python_wait:
        return None
    if inner in ("epoll_wait", "epoll_pwait", "select", "poll", "ppoll") or "select" in inner:
        return "event loop waiting for sockets"
    if any(frame.startswith("_worker (concurrent") for frame in named) and not any(
            "decode_stream" in frame for frame in named):
        return "pool thread waiting for work"
    return "waiting for a lock or the GIL"


def bucket_of(frames: list[str], rules: dict[str, str]) -> tuple[str, str]:
    """The bucket of a busy stack and the frame that decided it (innermost match)."""
    for frame in reversed(frames):
        for suffix, bucket in rules.items():
            if frame.endswith(suffix):
                return bucket, frame
        for bucket, keys in BUCKETS:
            if any(key in frame for key in keys):
                return bucket, frame
    return OTHER, ""


@dataclass
class Profile:
    """A raw py-spy profile sorted into buckets."""

    busy: int = 0
    idle: collections.Counter[str] = field(default_factory=collections.Counter)
    buckets: collections.Counter[str] = field(default_factory=collections.Counter)
    deciding: dict[str, collections.Counter[str]] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter))
    other: collections.Counter[str] = field(default_factory=collections.Counter)
    processes: collections.Counter[str] = field(default_factory=collections.Counter)
    run_sites: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    lost_runs: int = 0
    around_runs: int = 0

    def engine_split(self) -> dict[str, int]:
        """decode_streams' samples: encoder, decoder and joiner, onnxruntime code whose
        caller py-spy could not unwind to, and the C++ around the runs. Per process, the
        onnxruntime call site with the most samples is the encoder's."""
        encoder = 0
        for process in {process for process, _ in self.run_sites}:
            encoder += max(count for (owner, _), count in self.run_sites.items()
                           if owner == process)
        runs = sum(self.run_sites.values())
        return dict(zip(ENGINE_SPLIT, (encoder, runs - encoder, self.lost_runs, self.around_runs),
                        strict=True))

    def engine(self) -> int:
        return self.buckets[ENGINE_RUNS] + self.buckets[FEATURES]

    def record(self) -> dict[str, Any]:
        return {
            "busy_samples": self.busy,
            "idle_samples": dict(self.idle),
            "buckets": {name: self.buckets[name] for name in BUCKET_NAMES},
            "engine_split": self.engine_split(),
            "server_per_engine": round(self.busy / self.engine(), 3) if self.engine() else None,
            "busy_per_process": dict(self.processes),
            "deciding_frames": {name: [f"{count} {frame}" for frame, count in
                                       self.deciding[name].most_common(6)]
                                for name in BUCKET_NAMES if self.deciding[name]},
            "other_stacks": [f"{count} {stack}" for stack, count in self.other.most_common(15)],
        }


def classify(raw: Path, rules: dict[str, str]) -> Profile:
    """Sort the samples of a `py-spy record --format raw` file ("frame;frame;... count",
    root first; with --subprocesses the first frames name the processes)."""
    found = Profile()
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        process = ""
        while frames and frames[0].startswith("process "):
            process = frames.pop(0).split(":", 1)[0]
        why = idle_kind(frames)
        if why is not None:
            found.idle[why] += count
            continue
        found.busy += count
        found.processes[process or "main"] += count
        bucket, frame = bucket_of(frames, rules)
        found.buckets[bucket] += count
        if bucket == OTHER:
            named = [name_of(frame) for frame in frames if not ADDRESS.match(frame)]
            found.other[" > ".join(named[-4:])] += count
            continue
        found.deciding[bucket][frame] += count
        if bucket == ENGINE_RUNS:
            runs = [at for at, frame in enumerate(frames) if frame.startswith("OrtApis::Run ")]
            below = frames[frames.index(frame) + 1:]
            if runs and runs[0] > 0:
                found.run_sites[process, frames[runs[0] - 1]] += count
            elif below and "_sherpa_onnx" in below[0]:  # the binding's own code, unwound
                found.around_runs += count
            else:  # a kernel without unwind information: the chain stops in onnxruntime
                found.lost_runs += count
    return found


# -- measuring ---------------------------------------------------------------------------


def machine_jiffies() -> tuple[int, int]:
    """(busy, all) jiffies of every core together, from /proc/stat."""
    values = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return sum(values) - idle, sum(values)


async def measured_run(target: serve_load.Target, clients: int, duration_s: float,
                       onset: dict[str, float],
                       spy: tuple[float, list[str]] | None) -> dict[str, Any]:
    """serve_load's paced run; with `spy` (seconds, a py-spy command) py-spy starts that
    many seconds in. Adds the machine's busy cores and the load generator's and py-spy's
    own CPU seconds."""
    busy_before, all_before = machine_jiffies()
    own_before = time.process_time()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = asyncio.create_task(serve_load.paced_run(target, clients, duration_s, onset))
    spied: dict[str, Any] = {}
    if spy is not None:
        lead_s, command = spy
        await asyncio.sleep(lead_s)
        spied["load_1min_at_start"] = round(os.getloadavg()[0], 2)
        process = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        output, _ = await process.communicate()
        text = output.decode(errors="replace")
        samples = re.search(r"Samples: (\d+) Errors: (\d+)", text)
        behind = [float(value) for value in re.findall(r"([\d.]+)s behind in sampling", text)]
        spied.update({
            "returncode": process.returncode,
            "samples": int(samples.group(1)) if samples else None,
            "errors": int(samples.group(2)) if samples else None,
            "behind_s_max": max(behind, default=0.0),
            "load_1min_at_end": round(os.getloadavg()[0], 2),
        })
        if process.returncode:
            spied["output"] = text[-2000:]
    result = await run
    busy_after, all_after = machine_jiffies()
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result["machine_busy_cores"] = round(
        (os.cpu_count() or 1) * (busy_after - busy_before) / max(1, all_after - all_before), 2)
    result["load_generator_cpu_s"] = round(time.process_time() - own_before, 1)
    if spy is not None:
        spied["cpu_s"] = round(children_after.ru_utime + children_after.ru_stime
                               - children_before.ru_utime - children_before.ru_stime, 1)
        result["py_spy"] = spied
    return result


@dataclass
class Server:
    """A server to profile: its name, command, folder, port and protocol."""

    name: str
    command: list[str]
    cwd: Path
    port: int
    protocol: str  # serve_load's: "streamasr" or "sherpa"
    subprocesses: bool  # profile the children (serve --workers N) too


async def profile_server(server: Server, args: argparse.Namespace, onset: dict[str, float],
                         rules: dict[str, str], raw: Path) -> dict[str, Any]:
    """Start `server`, run the plain and the profiled paced run, stop it, sort the profile."""
    path = "/ws" if server.protocol == "streamasr" else ""
    with started({server.name: server.command}, {server.name: server.cwd},
                 {server.name: server.port}) as processes:
        pid = processes[server.name].pid
        target = serve_load.Target(server.name, server.protocol,
                                   f"ws://127.0.0.1:{server.port}{path}", pid)
        if not onset:  # the clips' speech onsets, from streamasr's detector (the first server)
            onset.update(await serve_load.onsets(target.url))
        plain = await measured_run(target, args.clients, args.duration_s, onset, None)
        print(json.dumps({"plain": server.name, "cpu": plain["server_cpu_per_audio_s"],
                          "load": plain["load_1min"]}), file=sys.stderr, flush=True)
        lead_s = max(2.5, (args.duration_s - args.profile_s) / 2)
        spy = ["py-spy", "record", "--native", "--format", "raw",
               "-r", str(args.rate), "-d", str(args.profile_s), "--pid", str(pid),
               "-o", str(raw), *(["--subprocesses"] if server.subprocesses else [])]
        for attempt in range(1, args.spy_tries + 1):  # py-spy --native now and then crashes
            raw.unlink(missing_ok=True)
            profiled = await measured_run(target, args.clients, args.duration_s, onset,
                                          (lead_s, spy))
            profiled["py_spy"]["attempt"] = attempt
            print(json.dumps({"profiled": server.name, "cpu": profiled["server_cpu_per_audio_s"],
                              "load": profiled["load_1min"],
                              "py_spy_returncode": profiled["py_spy"]["returncode"]}),
                  file=sys.stderr, flush=True)
            if profiled["py_spy"]["returncode"] == 0:
                break
    return {"command": shown(server.command), "plain": plain, "profiled": profiled,
            "py_spy_command": shown(spy),
            "profile": classify(raw, rules).record() if raw.is_file() else None}


def versions() -> dict[str, str]:
    """The versions that shape the profiles."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": sys.version.split()[0]}
    for package in ("sherpa-onnx", "websockets", "uvicorn", "uvloop", "fastapi", "starlette",
                    "numpy"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "absent"
    spy = subprocess.run(["py-spy", "--version"], capture_output=True, text=True, check=False)
    found["py-spy"] = spy.stdout.strip().removeprefix("py-spy ")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True, check=False)
    found["streamasr_commit"] = commit.stdout.strip()
    return found


# -- the table ---------------------------------------------------------------------------


def table(record: dict[str, Any]) -> str:
    """Markdown: per bucket and server, the share of busy samples and that share of the
    plain run's CPU seconds per audio second (in ms); then the totals."""
    servers = record["servers"]
    names = list(servers)
    lines = ["| where | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]

    def cell(name: str, samples: int) -> str:
        profile = servers[name]["profile"]
        cpu = servers[name]["plain"]["server_cpu_per_audio_s"]
        share = samples / profile["busy_samples"] if profile["busy_samples"] else 0.0
        return f"{100 * share:.1f} % ({1000 * share * cpu:.2f})" if cpu else f"{100 * share:.1f} %"

    for bucket in BUCKET_NAMES:
        row = [cell(name, servers[name]["profile"]["buckets"][bucket]) for name in names]
        lines.append(f"| {bucket} | " + " | ".join(row) + " |")
        if bucket == ENGINE_RUNS:
            for part in ENGINE_SPLIT:
                row = [cell(name, servers[name]["profile"]["engine_split"][part]) for name in names]
                lines.append(f"| &nbsp;&nbsp;of which {part} | " + " | ".join(row) + " |")

    def totals(label: str, value: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(str(value(servers[name])) for name in names)
                     + " |")

    totals("**server / engine** (busy / engine samples)",
           lambda s: f"**{s['profile']['server_per_engine']}**")
    totals("busy samples (idle ones left out)",
           lambda s: f"{s['profile']['busy_samples']} "
                     f"({sum(s['profile']['idle_samples'].values())})")
    totals("CPU s per audio s, plain / profiled run",
           lambda s: f"{s['plain']['server_cpu_per_audio_s']} / "
                     f"{s['profiled']['server_cpu_per_audio_s']}")
    totals("final p99 s, plain / profiled run",
           lambda s: f"{s['plain']['final_s']['p99']} / {s['profiled']['final_s']['p99']}")
    totals("sessions; lost, dropped, refused (plain)",
           lambda s: f"{s['plain']['sessions']}; {s['plain']['lost_finals']}, "
                     f"{s['plain']['dropped']}, {s['plain']['refused']}")
    totals("load average (1 min) before / after, plain; profiled",
           lambda s: f"{s['plain']['load_1min'][0]} / {s['plain']['load_1min'][1]}; "
                     f"{s['profiled']['load_1min'][0]} / {s['profiled']['load_1min'][1]}")
    totals("machine busy cores, plain / profiled",
           lambda s: f"{s['plain']['machine_busy_cores']} / {s['profiled']['machine_busy_cores']}")
    totals("py-spy samples, CPU s, most behind s",
           lambda s: f"{s['profiled']['py_spy']['samples']}, {s['profiled']['py_spy']['cpu_s']}, "
                     f"{s['profiled']['py_spy']['behind_s_max']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sherpa-onnx", type=Path, default=os.environ.get("SHERPA_ONNX_REPO"),
                        help="a git clone of k2-fsa/sherpa-onnx (or SHERPA_ONNX_REPO)")
    parser.add_argument("--rev", default="HEAD", help="its commit to run")
    parser.add_argument("--model", type=Path, default=REPO / "models" / "tiny-en")
    parser.add_argument("--clients", type=int, default=96)
    parser.add_argument("--duration-s", type=float, default=25.0, help="each paced run")
    parser.add_argument("--profile-s", type=int, default=20,
                        help="py-spy's recording, from the middle of the profiled run")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--spy-tries", type=int, default=3,
                        help="profiled runs per server until py-spy exits cleanly (its "
                             "--native unwinding crashes now and then; each try is recorded)")
    parser.add_argument("--workers", type=int, default=2, help="streamasr serve --workers")
    parser.add_argument("--threads", type=int, default=1, help="engine threads, both servers")
    parser.add_argument("--sherpa-pool", type=int, default=2,
                        help="sherpa-onnx's server's --nn-pool-size (2: its best on 2 cores)")
    parser.add_argument("--asyncio-loop", action="store_true",
                        help="also profile streamasr serve under STREAMASR_LOOP=asyncio")
    parser.add_argument("--raw-dir", type=Path, default=None,
                        help="keep the raw py-spy profiles here (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=Path("serve_profile.json"))
    parser.add_argument("--classify", type=Path, default=None, metavar="RAW",
                        help="only sort this raw profile into buckets and print them (with "
                             "--sherpa-onnx for a profile of sherpa-onnx's server)")
    args = parser.parse_args()
    if args.classify is not None:
        rules = {}
        if args.sherpa_onnx is not None:
            with tempfile.TemporaryDirectory() as tmp:
                extract_sherpa_server(args.sherpa_onnx, args.rev, Path(tmp))
                rules = source_rules(Path(tmp) / SHERPA_SOURCE)
        print(json.dumps(classify(args.classify, rules).record(), indent=2))
        return
    if args.sherpa_onnx is None:
        parser.error("--sherpa-onnx PATH (a git clone of k2-fsa/sherpa-onnx) is required")
    if not 1 <= args.spy_tries <= 10:
        parser.error("--spy-tries: 1 to 10")
    if not 1 <= args.clients <= serve_load.MAX_CLIENTS:
        parser.error(f"--clients: 1 to {serve_load.MAX_CLIENTS}")
    if not (1 <= args.profile_s and args.profile_s + 5 <= args.duration_s <= 120):
        parser.error("--profile-s: at least 1; --duration-s: --profile-s + 5 to 120")
    model = args.model.resolve()
    files = model_files(model)
    load_at_start = [round(value, 2) for value in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="serve-profile-") as tmp:
        folder = Path(tmp)
        raw_dir = args.raw_dir or folder
        raw_dir.mkdir(parents=True, exist_ok=True)
        commit = extract_sherpa_server(args.sherpa_onnx, args.rev, folder)
        rules = source_rules(folder / SHERPA_SOURCE)
        serve = serve_command(model, args.threads, args.workers)
        servers = [Server("streamasr", [*serve, "--port", str(port := free_port())], REPO, port,
                          "streamasr", args.workers > 1)]
        if args.asyncio_loop:  # `env` execs the server: its pid is the server's
            servers.append(Server("streamasr (asyncio loop)",
                                  ["env", "STREAMASR_LOOP=asyncio", *serve, "--port",
                                   str(port := free_port())], REPO, port, "streamasr",
                                  args.workers > 1))
        servers.append(Server("sherpa-onnx", [*sherpa_command(files, port := free_port(),
                                                               args.threads),
                                              "--nn-pool-size", str(args.sherpa_pool)],
                              folder, port, "sherpa", False))
        onset: dict[str, float] = {}
        results = {}
        for server in servers:
            raw = raw_dir / (re.sub(r"[^a-z0-9]+", "-", server.name).strip("-") + ".raw")
            results[server.name] = asyncio.run(profile_server(server, args, onset, rules, raw))
    record = {
        "cpu": cpu_model(), "cores": os.cpu_count(),
        "load_avg_at_start": load_at_start,
        "load_avg_at_end": [round(value, 2) for value in os.getloadavg()],
        "versions": versions(), "sherpa_onnx_commit": commit,
        "model": {part: path.name for part, path in files.items()},
        "settings": {"clients": args.clients, "duration_s": args.duration_s,
                     "profile_s": args.profile_s, "rate": args.rate, "workers": args.workers,
                     "threads": args.threads, "sherpa_pool": args.sherpa_pool,
                     "message_s": serve_load.BLOCK_S},
        "onset_s": onset, "servers": results,
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    failed = [name for name, result in results.items() if result["profile"] is None]
    if failed:
        raise SystemExit(f"no profile of {', '.join(failed)}: see py_spy in {args.out}")
    record["table"] = table(record)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(record["table"])
    print(f"CPU: {record['cpu']}, {record['cores']} cores; load average at start "
          f"{load_at_start}, at end {record['load_avg_at_end']} -> {args.out}")


if __name__ == "__main__":
    main()
