"""Optimised-graph cache: sherpa-onnx loads graphs ONNX Runtime has already optimised once.

Why: most of a model load is ONNX Runtime's graph optimisation (fusions, constant folding
over thousands of nodes), redone on every load because sherpa-onnx keeps no optimised copy.
Here the first load of an ONNX file saves ONNX Runtime's optimised form of it
(`ORT_ENABLE_EXTENDED`: fusions, no hardware-specific memory layouts), after graph_rewrite.py's
rewrites (Zipformer's softplus in fewer passes: 6-8 % of the engine's CPU time), and later
loads hand that file to sherpa-onnx instead.

An entry is keyed on what makes it valid: the source file's sha256, the version of the ONNX
Runtime library sherpa-onnx runs (the one that writes the entry, see graph_build.py), the
optimisation level, the CPU architecture and instruction-set flags, and this format's
version. An entry holds the optimised graph and `entry.json` with that graph's sha256, size
and file identity (inode, mtime, ctime); before every use the graph is checked against them,
and re-hashed when its identity moved, so a truncated or altered entry is removed and rebuilt
with a warning. A source's sha256 is remembered the same way (`.sources/`, keyed on its
path, re-hashed when its size, inode, mtime or ctime moved): a load does not read hundreds of
MB of weights twice just to find its entry (0.7 s of CPU for a 261 MB fp32 encoder), and does
not load OpenSSL's hashlib at all (3.5 MB of resident memory). ONNX files hold no code; no
custom-op library is ever registered. Entries are built in a temporary folder and renamed
into place, so a reader sees a whole entry or none.

Where: `$STREAMASR_GRAPH_CACHE_DIR`, else `.graphs/` in the model cache. Off:
`STREAMASR_GRAPH_CACHE=0`. Files over 1.5 GB are left alone (ONNX Runtime cannot write an
optimised graph over the 2 GB protobuf limit without external data).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

from streamasr.backends.sherpa.graph_rewrite import key as rewrite_key

log = logging.getLogger("streamasr")

ENV_SWITCH = "STREAMASR_GRAPH_CACHE"
ENV_DIR = "STREAMASR_GRAPH_CACHE_DIR"
FOLDER = ".graphs"
SOURCES = ".sources"  # under the cache root: each source file's sha256, by path
ENTRY_FILE = "entry.json"
GRAPH_FILE = "model.onnx"
LEVEL_EXTENDED = 2  # GraphOptimizationLevel ORT_ENABLE_EXTENDED
FORMAT = 1  # bump when an entry's layout or meaning changes
MAX_SOURCE_BYTES = 1536 * 1024 * 1024
BUILD_TIMEOUT_S = 1800
_OFF = {"0", "false", "no", "off"}


def enabled() -> bool:
    """False when the user switched the cache off ($STREAMASR_GRAPH_CACHE=0)."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in _OFF


def cache_root() -> Path:
    """Where entries live: $STREAMASR_GRAPH_CACHE_DIR, else `.graphs` in the model cache."""
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env).expanduser()
    from streamasr.distribution.cache import cache_dir

    return cache_dir() / FOLDER


@cache
def ort_library() -> Path | None:
    """The ONNX Runtime library bundled in the installed sherpa-onnx, if it has one."""
    import importlib.util

    spec = importlib.util.find_spec("sherpa_onnx")
    if spec is None or spec.origin is None:
        return None
    lib = Path(spec.origin).parent / "lib"
    for pattern in ("libonnxruntime.so*", "libonnxruntime*.dylib", "onnxruntime.dll"):
        found = sorted(lib.glob(pattern))
        if found:
            return found[0]
    return None


@cache
def ort_version() -> str | None:
    """Version of sherpa-onnx's ONNX Runtime, read through its C API; None if unknown."""
    library = ort_library()
    if library is None:
        return None
    from streamasr.backends.sherpa.graph_build import library_version

    try:
        return library_version(str(library)) or None
    except (OSError, AttributeError) as exc:
        log.debug("graph cache: cannot read the ONNX Runtime version of %s: %s", library, exc)
        return None


@cache
def cpu_signature() -> str:
    """Architecture plus a digest of the CPU's instruction-set flags."""
    flags = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith(("flags", "Features")):
                flags = " ".join(sorted(line.partition(":")[2].split()))
                break
    flags = flags or platform.processor()
    return f"{platform.machine()}-{text_sha256(flags)[:16]}"


def text_sha256(text: str) -> str:
    """sha256 of a short string, by CPython's built-in sha256 where it has one: hashlib maps
    OpenSSL's libcrypto (3.5 MB resident), worth it only for reading whole files."""
    for name in ("_sha256", "_sha2"):  # CPython 3.11; 3.12 and later
        with contextlib.suppress(ImportError):
            return str(importlib.import_module(name).sha256(text.encode()).hexdigest())
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in 1 MiB blocks (OpenSSL's: several times faster)."""
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def identity(status: os.stat_result) -> list[int]:
    """What changes whenever a file's bytes do: size, inode, device, mtime and ctime (ctime
    cannot be set back by hand, so an edit that restores the mtime still shows)."""
    return [status.st_size, status.st_ino, status.st_dev, status.st_mtime_ns,
            status.st_ctime_ns]


def source_sha256(source: Path, root: Path) -> str:
    """The source's sha256, hashed only when its identity differs from the remembered one."""
    memo = root / SOURCES / f"{text_sha256(str(source.resolve()))[:40]}.json"
    seen = identity(source.stat())
    with contextlib.suppress(OSError, ValueError):
        record = json.loads(memo.read_text())
        if isinstance(record, dict) and record.get("identity") == seen:
            digest = record.get("sha256")
            if isinstance(digest, str) and len(digest) == 64:
                return digest
    digest = file_sha256(source)
    if identity(source.stat()) == seen:  # not written to while it was read
        _write_json(memo, {"source": str(source), "identity": seen, "sha256": digest})
    return digest


def _write_json(path: Path, record: dict[str, object]) -> None:
    """Replace a small JSON file whole (readers see the old one or the new one); a cache
    that cannot be written to only costs a re-hash next time."""
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(json.dumps(record, indent=1) + "\n")
        staged.replace(path)
    except OSError as exc:
        log.debug("graph cache: cannot write %s: %s", path, exc)
        with contextlib.suppress(OSError):
            staged.unlink()


def entry_key(source_sha256: str, version: str, rewrites: str) -> str:
    """The entry name: everything an optimised graph's validity depends on, hashed."""
    parts = (f"{source_sha256}|ort {version}|level {LEVEL_EXTENDED}|{cpu_signature()}|v{FORMAT}"
             f"|rewrite {rewrites}")
    return text_sha256(parts)[:40]


def _valid_graph(entry: Path) -> tuple[Path | None, str]:
    """(graph, "") for a whole entry; (None, why) for a damaged one; (None, "failed") if
    building it failed before (it is not retried until the key changes)."""
    try:
        record = json.loads((entry / ENTRY_FILE).read_text())
    except (OSError, ValueError) as exc:
        return None, f"unreadable {ENTRY_FILE} ({exc.__class__.__name__})"
    if not isinstance(record, dict):
        return None, f"{ENTRY_FILE} is not an object"
    if record.get("failed"):
        return None, "failed"
    graph = entry / GRAPH_FILE
    try:
        status = graph.stat()
    except OSError:
        return None, f"{GRAPH_FILE} is missing"
    if status.st_size != record.get("bytes"):
        return None, f"{GRAPH_FILE} has {status.st_size} bytes, {record.get('bytes')} were written"
    if record.get("identity") == identity(status):
        return graph, ""  # untouched since it was hashed
    if file_sha256(graph) != record.get("sha256"):
        return None, f"{GRAPH_FILE} does not match the sha256 recorded when it was written"
    _write_json(entry / ENTRY_FILE, {**record, "identity": identity(status)})
    return graph, ""


def optimised_paths(sources: list[Path]) -> list[Path]:
    """The optimised graph to load for each source, building missing entries; a source whose
    entry cannot be had (cache off, no bundled ONNX Runtime, too large, build failed) is
    returned as it is."""
    if not enabled():
        return list(sources)
    version = ort_version()
    library = ort_library()
    if version is None or library is None:
        log.debug("graph cache: sherpa-onnx bundles no ONNX Runtime library this can use")
        return list(sources)
    root = cache_root()
    rewrites = rewrite_key()
    chosen = list(sources)
    missing: list[tuple[int, Path]] = []
    for index, source in enumerate(sources):
        if source.is_file() and source.stat().st_size > MAX_SOURCE_BYTES:
            log.debug("graph cache: %s is too large for a single-file optimised graph", source)
            continue
        try:
            entry = root / entry_key(source_sha256(source, root), version, rewrites)
        except OSError as exc:  # the load that follows says what is wrong with the file
            log.debug("graph cache: cannot read %s (%s)", source, exc)
            continue
        graph, why = _valid_graph(entry) if entry.exists() else (None, "")
        if graph is not None:
            chosen[index] = graph
        elif why == "failed":
            log.debug("graph cache: optimising %s failed before; loading it as it is", source)
        else:
            if why:
                log.warning("graph cache entry %s is damaged (%s); rebuilding it", entry, why)
                shutil.rmtree(entry, ignore_errors=True)
            missing.append((index, entry))
    if missing:
        jobs = [(sources[i], entry) for i, entry in missing]
        built = _build(library, version, rewrites, jobs, root)
        for (index, _), graph in zip(missing, built, strict=True):
            if graph is not None:
                chosen[index] = graph
    return chosen


def refuse(graphs: list[Path], reason: str) -> None:
    """Mark the entries of graphs the engine would not load as failed: later loads take the
    original files straight away instead of trying these again."""
    for graph in graphs:
        entry = graph.parent
        if graph.name != GRAPH_FILE or not (entry / ENTRY_FILE).is_file():
            continue  # an original file, not one of ours
        staged = entry / f".{ENTRY_FILE}.{os.getpid()}"
        try:
            staged.write_text(json.dumps({"source": graph.name, "failed": reason}) + "\n")
            staged.replace(entry / ENTRY_FILE)
        except OSError as exc:
            log.debug("graph cache: cannot mark %s as failed: %s", entry, exc)


def prepare_folder(directory: Path) -> None:
    """Optimise the graphs a load of this model folder uses (`models pull` calls this), so
    its first load is as quick as later ones. Not a sherpa-onnx model folder: nothing to do."""
    from streamasr.backends.sherpa.modeldir import resolve_model
    from streamasr.errors import StreamAsrError

    try:
        files = resolve_model(str(directory))
    except StreamAsrError as exc:
        log.debug("graph cache: %s is not a sherpa-onnx model folder (%s)", directory, exc)
        return
    optimised_paths(list(files.onnx_files()))


def _build(
    library: Path, version: str, rewrites: str, jobs: list[tuple[Path, Path]], root: Path
) -> list[Path | None]:
    """Optimise every (source, entry) in one child process (graph_rewrite.py's rewrites first
    unless `rewrites` is "off"); rename each entry into place."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    except OSError as exc:
        log.warning("graph cache: cannot write in %s (%s); loading the original graphs", root, exc)
        return [None] * len(jobs)
    try:
        argv = [sys.executable, "-m", "streamasr.backends.sherpa.graph_build", str(library)]
        argv += [str(LEVEL_EXTENDED), rewrites]
        for number, (source, _) in enumerate(jobs):
            (work / str(number)).mkdir()
            argv += [str(source.resolve()), str(work / str(number) / GRAPH_FILE)]
        log.debug("graph cache: optimising %d graph(s) with ONNX Runtime %s", len(jobs), version)
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
            )
            failure = done.stderr.strip().splitlines()[-1:] if done.returncode else []
        except (OSError, subprocess.TimeoutExpired) as exc:
            failure = [str(exc)]
        return [
            _install(work / str(number), entry, source, version, " ".join(failure))
            for number, (source, entry) in enumerate(jobs)
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _rewrites(staged: Path) -> int:
    """How many subgraphs graph_rewrite.py rewrote in the staged graph (its note removed)."""
    note = staged / f"{GRAPH_FILE}.rewrites"
    try:
        return int(note.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0
    finally:
        for leftover in (note, staged / f"{GRAPH_FILE}.rewritten.onnx"):
            with contextlib.suppress(OSError):
                leftover.unlink()


def _install(staged: Path, entry: Path, source: Path, version: str, failure: str) -> Path | None:
    """Record the staged graph (or the failure) and rename the entry into place."""
    graph = staged / GRAPH_FILE
    rewrites = _rewrites(staged)
    record: dict[str, object] = {"source": source.name, "ort_version": version,
                                 "level": LEVEL_EXTENDED, "cpu": cpu_signature()}
    if failure or not graph.is_file():
        reason = failure or "ONNX Runtime wrote no optimised graph"
        # the load that follows reports a broken model itself; this only costs speed
        log.debug("graph cache: cannot optimise %s (%s); loading it as it is", source, reason)
        record["failed"] = reason
    else:
        record.update(bytes=graph.stat().st_size, sha256=file_sha256(graph),
                      identity=identity(graph.stat()), rewrites=rewrites)
    (staged / ENTRY_FILE).write_text(json.dumps(record, indent=1) + "\n")
    try:
        staged.rename(entry)
    except OSError:
        pass  # another process put the same entry in place first; it is checked below
    found, _ = _valid_graph(entry)
    return found
