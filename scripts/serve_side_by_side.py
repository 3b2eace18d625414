#!/usr/bin/env python
"""`streamasr serve` beside sherpa-onnx's own Python server, in one command.

    python scripts/serve_side_by_side.py --sherpa-onnx PATH_TO_SHERPA_ONNX_GIT \
        --ladder 2,4,6,8,12 --duration-s 20 --repeats 2 --overload --out side_by_side.json

PATH_TO_SHERPA_ONNX_GIT is a clone of k2-fsa/sherpa-onnx (a work tree or a bare mirror):
its `python-api-examples/streaming_server.py`, `http_server.py` and `web/` are taken out of
git (`--rev`, default HEAD) into a temporary folder and run from there, so nothing of it is
copied into this project.

Starts, on free loopback ports, with the same model files and engine settings (1 thread,
or `--threads N`; batches of up to 32 streams, 5 ms wait for a batch; `--workers N` runs
each streamasr server as N processes and `--sherpa-threads N` gives sherpa-onnx's server,
one process, N engine threads: each server's own way to use the cores):

- `streamasr serve` with its defaults (each message fed as it comes, 0.3 s tail padding: as
  sherpa-onnx's server does; ready stepping),
- with `--schedules ready,aligned`, one `streamasr serve` per schedule ("streamasr" is the
  default one, ready; "streamasr-aligned" the one with `--schedule aligned`; records made
  before ready became this script's default name the aligned server "streamasr" and the
  ready one "streamasr-ready": each record's "commands" says which is which),
- sherpa-onnx's `streaming_server.py` at its best setting: `--sherpa-pool N` gives its
  `--nn-pool-size` (N tasks decoding in a thread pool, so its engine uses N cores); without
  it a short pre-pass (10 s per count, one pass over the ladder, beside the first streamasr
  server) runs it at every pool size from 1 to the core count and keeps the one that held
  the most clients (on a tie, the least CPU per audio second); the record says which
  ("sherpa_pool") and what the pre-pass found,
- with `--sherpa-graphs`, also sherpa-onnx's server on the graphs streamasr loads
  ("sherpa-onnx-graphs": the graph cache's rewritten, optimised files, same pool size), so
  a run tells the engine's share of a lead (the graphs) from the server's,
- with `--file-settings`, also `streamasr serve --block-ms 320 --tail-padding 0.66`
  ("streamasr-file": `streamasr file`'s defaults, one chunk and 0.66 s),
- with `--baseline PATH`, the `streamasr serve` of another checkout (a git worktree of an
  earlier commit: `git worktree add --detach ../before COMMIT`) with the same settings
  ("streamasr-baseline"), so a change is measured against what it replaces in one run,

then runs `scripts/serve_load.py --ladder ...` against them (interleaved, same
clients, same clips; the load average, CPU model and each server's CPU seconds recorded
per run), stops them and writes serve_load's JSON (plus the commands and the sherpa-onnx
commit) to `--out` and a short table to stdout. `--model DIR` runs another sherpa-onnx
transducer folder (e.g. build/full/full-random-en) the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path

from serve_load import SERVER_CONNECTIONS  # scripts/, this script's folder

REPO = Path(__file__).resolve().parent.parent
START_LIMIT_S = 300.0
ENGINE = {"threads": 1, "max_batch": 32, "max_wait_ms": 5}
MAX_CONNECTIONS = str(SERVER_CONNECTIONS)  # what serve_load gives its own server
PREPASS_S = "10"  # each run of the pool-size pre-pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", f"--git-dir={git_dir(repo)}", *args], check=True,
                          capture_output=True).stdout


def git_dir(repo: Path) -> Path:
    return repo / ".git" if (repo / ".git").exists() else repo


def extract_sherpa_server(repo: Path, rev: str, into: Path) -> str:
    """streaming_server.py, http_server.py and web/ of `rev` into `into`; the commit."""
    for name in ("streaming_server.py", "http_server.py"):
        (into / name).write_bytes(git(repo, "show", f"{rev}:python-api-examples/{name}"))
    archive = git(repo, "archive", "--format=tar", rev, "python-api-examples/web")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        for member in tar.getmembers():
            member.name = member.name.removeprefix("python-api-examples/")
        tar.extractall(into, filter="data")
    return git(repo, "rev-parse", "--short", rev).decode().strip()


def left_context(path: Path) -> int:
    match = re.search(r"chunk-\d+-left-(\d+)", path.name)
    return int(match.group(1)) if match else 0


def model_files(folder: Path) -> dict[str, Path]:
    """The files `streamasr serve --model folder --chunk 16` loads: the longest left context,
    int8 encoder and joiner where present."""
    found: dict[str, Path] = {"tokens": folder / "tokens.txt"}
    encoders = list(folder.glob("encoder-*chunk-16-*.onnx"))
    if not encoders:
        raise SystemExit(f"{folder}: no encoder-*chunk-16-*.onnx")
    tag = f"chunk-16-left-{max(left_context(path) for path in encoders)}"
    for part in ("encoder", "decoder", "joiner"):
        names = sorted(folder.glob(f"{part}-*{tag}.*onnx"))
        int8 = [name for name in names if name.name.endswith(".int8.onnx")]
        fp32 = [name for name in names if not name.name.endswith(".int8.onnx")]
        pick = (int8 or fp32) if part != "decoder" else (fp32 or int8)
        if not pick:
            raise SystemExit(f"{folder}: no {part}-*chunk-16-*.onnx")
        found[part] = pick[0]
    if not found["tokens"].is_file():
        raise SystemExit(f"{folder}: no tokens.txt")
    return found


def cached_graphs(files: dict[str, Path]) -> dict[str, Path]:
    """`files` with each graph swapped for the graph cache's entry: what `streamasr serve`
    loads (built here if missing)."""
    from streamasr.backends.sherpa import graph_cache

    parts = ("encoder", "decoder", "joiner")
    optimised = graph_cache.optimised_paths([files[part] for part in parts])
    if optimised == [files[part] for part in parts]:
        raise SystemExit("--sherpa-graphs: the graph cache is off or cannot build entries here")
    return {**files, **dict(zip(parts, optimised, strict=True))}


def wait_port(port: int, process: subprocess.Popen[bytes], name: str) -> None:
    deadline = time.monotonic() + START_LIMIT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{name} exited with {process.returncode} before it listened")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise SystemExit(f"{name} did not listen within {START_LIMIT_S:g} s")


@contextlib.contextmanager
def started(commands: dict[str, list[str]], cwds: dict[str, Path],
            ports: dict[str, int]) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """The servers of `commands`, each listening on its port; stopped (SIGTERM, then killed
    after 60 s) when the block ends."""
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, command in commands.items():
            processes[name] = subprocess.Popen(command, cwd=cwds.get(name, REPO),
                                               stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL)
        for name, process in processes.items():
            wait_port(ports[name], process, name)
        yield processes
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


def run_servers(commands: dict[str, list[str]], cwds: dict[str, Path], ports: dict[str, int],
                load_args: list[str]) -> dict:
    """Start the servers, run serve_load against them (`load_args`: ladder, duration,
    repeats, ...), stop them; serve_load's result."""
    with started(commands, cwds, ports) as processes:
        targets = []
        for name, process in processes.items():
            sherpa = name.startswith("sherpa-onnx")
            protocol, path = ("sherpa", "") if sherpa else ("streamasr", "/ws")
            targets += ["--target",
                        f"{protocol},{name},{process.pid},ws://127.0.0.1:{ports[name]}{path}"]
        load = [sys.executable, str(REPO / "scripts" / "serve_load.py"), *load_args, *targets]
        done = subprocess.run(load, cwd=REPO, check=True, capture_output=True, text=True)
        return dict(json.loads(done.stdout))


def serve_command(model: Path, threads: int, workers: int) -> list[str]:
    """`streamasr serve` with the engine settings both servers get (add --port)."""
    return [sys.executable, "-m", "streamasr", "serve", "--model", str(model), "--chunk", "16",
            "--threads", str(threads), "--max-batch", str(ENGINE["max_batch"]),
            "--max-wait-ms", str(ENGINE["max_wait_ms"]), "--max-connections", MAX_CONNECTIONS,
            "--workers", str(workers)]


def sherpa_command(files: dict[str, Path], port: int, threads: int) -> list[str]:
    """sherpa-onnx's streaming_server.py (run in the folder extract_sherpa_server filled)
    with the same engine settings and model files (add --nn-pool-size)."""
    return [sys.executable, "streaming_server.py", "--port", str(port),
            "--num-threads", str(threads), "--max-batch-size", str(ENGINE["max_batch"]),
            "--max-wait-ms", str(ENGINE["max_wait_ms"]),
            "--max-active-connections", MAX_CONNECTIONS, "--doc-root", "web",
            "--tokens", str(files["tokens"]), "--encoder", str(files["encoder"]),
            "--decoder", str(files["decoder"]), "--joiner", str(files["joiner"])]


def shown(command: list[str]) -> str:
    """A command as the record shows it: absolute paths cut to their last part."""
    return " ".join(re.sub(r"^.*/", "", part) if part.startswith("/") else part
                    for part in command)


def with_port(command: list[str], port: int, extra: list[str]) -> list[str]:
    """`command` listening on `port` instead, with `extra` arguments."""
    at = command.index("--port")
    return [*command[:at + 1], str(port), *command[at + 2:], *extra]


def best_pool(capacity: dict[str, int], runs: list[dict], pools: list[int]) -> int:
    """The pool size whose server held the most clients; on a tie, the one that spent the
    least CPU per audio second at the largest count both held."""
    def cost(pool: int) -> float:
        name = f"sherpa-onnx-pool{pool}"
        held = [run for run in runs if run["server"] == name
                and run["clients"] == capacity.get(name, 0)]
        return min((run["server_cpu_per_audio_s"] or 1e9 for run in held), default=1e9)

    return max(pools, key=lambda pool: (capacity.get(f"sherpa-onnx-pool{pool}", 0), -cost(pool)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sherpa-onnx", type=Path,
                        default=os.environ.get("SHERPA_ONNX_REPO"),
                        help="a git clone of k2-fsa/sherpa-onnx (or SHERPA_ONNX_REPO)")
    parser.add_argument("--rev", default="HEAD", help="its commit to run")
    parser.add_argument("--model", type=Path, default=REPO / "models" / "tiny-en")
    parser.add_argument("--ladder", default="2,4,6,8,12")
    parser.add_argument("--duration-s", default="20")
    parser.add_argument("--repeats", default="2")
    parser.add_argument("--overload", action="store_true")
    parser.add_argument("--file-settings", action="store_true",
                        help="also a server with streamasr file's feed block and padding")
    parser.add_argument("--threads", type=int, default=ENGINE["threads"],
                        help="engine threads of every server")
    parser.add_argument("--sherpa-threads", type=int, default=None,
                        help="sherpa-onnx's server's threads (default: --threads)")
    parser.add_argument("--workers", type=int, default=1,
                        help="streamasr serve --workers (server processes, one per core)")
    parser.add_argument("--schedules", default="ready",
                        help="streamasr servers to run, one per --schedule (ready,aligned)")
    parser.add_argument("--sherpa-pool", type=int, default=None,
                        help="sherpa-onnx's server's --nn-pool-size (decoding threads); default: "
                             "each from 1 to the core count in a short pre-pass, the best kept")
    parser.add_argument("--sherpa-graphs", action="store_true",
                        help="also sherpa-onnx's server on streamasr's cached graphs")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another streamasr checkout (e.g. a git worktree of an earlier "
                             "commit): its serve runs too, as streamasr-baseline, same settings")
    parser.add_argument("--out", type=Path, default=Path("serve_side_by_side.json"))
    args = parser.parse_args()
    if args.baseline is not None and not (args.baseline / "streamasr" / "__main__.py").is_file():
        parser.error(f"--baseline {args.baseline}: no streamasr checkout there")
    if args.sherpa_onnx is None:
        parser.error("--sherpa-onnx PATH (a git clone of k2-fsa/sherpa-onnx) is required")
    model = args.model.resolve()
    files = model_files(model)
    with tempfile.TemporaryDirectory(prefix="sherpa-server-") as tmp:
        try:
            commit = extract_sherpa_server(args.sherpa_onnx, args.rev, Path(tmp))
        except subprocess.CalledProcessError as exc:
            why = exc.stderr.decode(errors="replace").strip().splitlines()[-1:]
            parser.error(f"--sherpa-onnx {args.sherpa_onnx} --rev {args.rev}: no sherpa-onnx "
                         f"server there ({' '.join(why)}); give a git clone of "
                         "k2-fsa/sherpa-onnx and a commit it has")
        schedules = [name.strip() for name in args.schedules.split(",") if name.strip()]
        served = {("streamasr" if schedule == "ready" else f"streamasr-{schedule}"): schedule
                  for schedule in schedules}
        baseline = ["streamasr-baseline"] if args.baseline is not None else []
        names = [*served, *baseline, *(["streamasr-file"] if args.file_settings else []),
                 "sherpa-onnx", *(["sherpa-onnx-graphs"] if args.sherpa_graphs else [])]
        ports = {name: free_port() for name in names}
        serve = serve_command(model, args.threads, args.workers)
        commands = {
            **{name: [*serve, "--port", str(ports[name]), "--schedule", schedule]
               for name, schedule in served.items()},
            "streamasr-baseline": [*serve, "--port", str(ports["streamasr-baseline"]),
                                   "--schedule", schedules[0]] if baseline else [],
            "streamasr-file": [*serve, "--port", str(ports["streamasr-file"]),
                               "--block-ms", "320", "--tail-padding", "0.66"]
            if args.file_settings else [],
            "sherpa-onnx": sherpa_command(files, ports["sherpa-onnx"],
                                          args.sherpa_threads or args.threads),
            "sherpa-onnx-graphs": sherpa_command(cached_graphs(files),
                                                 ports["sherpa-onnx-graphs"],
                                                 args.sherpa_threads or args.threads)
            if args.sherpa_graphs else [],
        }
        commands = {name: command for name, command in commands.items() if command}
        cwds = {"sherpa-onnx": Path(tmp), "sherpa-onnx-graphs": Path(tmp),
                "streamasr-baseline": args.baseline or REPO}
        pool, prepass = args.sherpa_pool, None
        if pool is None:  # each pool size in a short pass beside the first streamasr server
            pools = list(range(1, (os.cpu_count() or 1) + 1))
            first = next(iter(served))
            trial = {first: commands[first]}
            trial_ports = {first: ports[first]}
            for size in pools:
                name = f"sherpa-onnx-pool{size}"
                trial_ports[name] = free_port()
                trial[name] = with_port(commands["sherpa-onnx"], trial_ports[name],
                                        ["--nn-pool-size", str(size)])
                cwds[name] = Path(tmp)
            prepass = run_servers(trial, cwds, trial_ports,
                                  ["--ladder", args.ladder, "--duration-s", PREPASS_S,
                                   "--repeats", "1"])
            pool = best_pool(prepass["capacity"], prepass["runs"], pools)
        for name in ("sherpa-onnx", "sherpa-onnx-graphs"):
            if name in commands:
                commands[name] = [*commands[name], "--nn-pool-size", str(pool)]
        overload = ["--overload"] if args.overload else []
        result = run_servers(commands, cwds, ports,
                             ["--ladder", args.ladder, "--duration-s", args.duration_s,
                              "--repeats", args.repeats, *overload])
    result["sherpa_pool"] = {"chosen": pool, "given": args.sherpa_pool is not None,
                             "prepass_capacity": prepass["capacity"] if prepass else None,
                             "prepass_runs": prepass["runs"] if prepass else None}
    result["sherpa_onnx_commit"] = commit
    result["model"] = {part: path.name for part, path in files.items()}
    result["commands"] = {name: shown(command) for name, command in commands.items()}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'N':>4} {'server':18} {'ft p50':>7} {'ft p99':>7} {'fin p50':>7} {'fin p99':>7} "
          f"{'sess':>4} {'fail':>4} {'cpu/s':>6} load")
    for run in result["runs"]:
        fails = run["lost_finals"] + run["dropped"] + run["refused"]
        print(f"{run['clients']:>4} {run['server']:18} {run['first_token_s']['p50']!s:>7} "
              f"{run['first_token_s']['p99']!s:>7} {run['final_s']['p50']!s:>7} "
              f"{run['final_s']['p99']!s:>7} {run['sessions']:>4} {fails:>4} "
              f"{run['server_cpu_per_audio_s']!s:>6} {run['load_1min']}")
    print("capacity:", result["capacity"], "->", args.out)


if __name__ == "__main__":
    main()
