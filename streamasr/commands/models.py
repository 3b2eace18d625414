"""`streamasr models list|pull|verify|path`: the model catalog and the local cache."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from streamasr.backends.registry import describe_folder, install_hooks, released
from streamasr.commands.common import VerboseOpt, cli_errors, err_console, note, setup_logging
from streamasr.distribution import install
from streamasr.distribution.cache import (
    cache_dir,
    describe_entry_state,
    find_cached,
    folder_argument,
    installed_models,
    require_cached,
    verify_installed,
)
from streamasr.distribution.catalog import CATALOG, find
from streamasr.distribution.download import DEFAULT_TIMEOUT_S, ProgressFn
from streamasr.distribution.local_models import bundled_models_dir, chunk_label, list_bundled
from streamasr.distribution.manifest import (
    MANIFEST_NAME,
    record_folder,
    verify_folder,
)
from streamasr.errors import ModelError, UsageError

models_app = typer.Typer(
    name="models",
    help="Released models: list them, pull them into the cache (checksummed, resumable), "
    "verify them, print their folder.",
    no_args_is_help=True,
)

NameArg = Annotated[str, typer.Argument(help="Alias (e.g. en-20M) or full release name.")]
LIST_FORMATS = ("table", "json")


def register(app: typer.Typer) -> None:
    """Add the `models` command group to the main app."""
    app.add_typer(models_app, name="models")


@models_app.command("list")
def list_models(
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="table (for reading) or json (for scripts).")
    ] = "table",
    verbose: VerboseOpt = False,
) -> None:
    """Known released models, and whether each is in the cache."""
    setup_logging(verbose)
    with cli_errors():
        if fmt not in LIST_FORMATS:
            raise UsageError(f"--format {fmt!r} is not known; use one of: table, json")
        cache = cache_dir()
        rows: list[dict[str, object]] = []
        for entry in CATALOG:
            directory = find_cached(entry.name, cache)
            facts = released(entry)
            rows.append({
                "name": entry.name,
                "aliases": list(entry.aliases),
                "engine": entry.engine,
                "language": entry.language,
                "kind": entry.kind,
                "token_type": entry.token_type,
                "chunks": list(facts.chunks), "chunk_label": chunk_label(facts.chunks),
                "att_context_sizes": [], **facts.record,  # the engine's own words
                "params_m": entry.params_m,
                "single_file": entry.single_file,
                "size_mb": entry.size_mb,
                "size_exact": entry.archive_bytes is not None,
                "archive_sha256": entry.archive_sha256,
                "installed": describe_entry_state(entry, cache),
                "directory": str(directory) if directory else None,
                "description": entry.description,
            })
        known = {entry.name for entry in CATALOG}
        custom = [m for m in installed_models(cache) if m.name not in known]
        for model in custom:
            installed = "yes" if model.has_manifest else "yes (no manifest)"
            rows.append(_local_row(model.name, model.directory, installed,
                                   "pulled with --url/--archive"))
        for name in list_bundled():
            rows.append(_local_row(name, bundled_models_dir() / name, "bundled",
                                   "ships with streamasr (a demo/test model)"))
        _mark_default(rows)
        if fmt == "json":
            typer.echo(json.dumps({"cache": str(cache), "models": rows}, indent=2))
            return
        _print_table(rows, cache)


def _mark_default(rows: list[dict[str, object]]) -> None:
    """`default: true` on the model commands use without --model (config, else tiny-en)."""
    from streamasr import config

    wanted = config.load().model or (list_bundled() or ["tiny-en"])[0]
    entry = find(wanted)
    for row in rows:
        row["default"] = row["name"] == wanted or (entry is not None and row["name"] == entry.name)


def _local_row(name: str, directory: Path, installed: str, description: str) -> dict[str, object]:
    """A list row for a model folder the catalog does not know, described by its files."""
    facts = describe_folder(directory)
    return {
        "name": name, "aliases": [], "engine": facts.engine, "language": "?",
        "kind": facts.kind, "token_type": facts.token_type, "chunks": list(facts.chunks),
        "chunk_label": facts.chunk_label, "att_context_sizes": [], "params_m": None,
        "single_file": None, "size_mb": None, "size_exact": False, "archive_sha256": None,
        "installed": installed, "directory": str(directory), "description": description,
    }


# the full table needs ~190 columns; below WIDE_COLUMNS a terminal gets the columns a choice
# needs (name, language, engine, chunk, size, installed), which fit in 80
WIDE_COLUMNS = 150
FULL_COLUMNS = ("alias", "language", "engine", "kind", "tokens", "chunk", "size", "installed",
                "release name")
NARROW_COLUMNS = ("name", "lang", "engine", "chunk", "size", "installed")


def _short_chunks(label: str) -> str:
    """'1120/560/160/80 ms' -> '80-1120 ms', so a narrow table keeps one line per model."""
    values = sorted(int(v) for v in re.findall(r"\d+", label))
    if len(values) < 2:
        return label
    return f"{values[0]}-{values[-1]} ms"


def _print_table(rows: Sequence[Mapping[str, object]], cache: Path) -> None:
    console = Console()
    if not console.is_terminal:  # piped: one row per line, for grep
        console = Console(width=240)
    wide = console.width >= WIDE_COLUMNS
    table = Table() if wide else Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in FULL_COLUMNS if wide else NARROW_COLUMNS:
        table.add_column(
            column,
            justify="right" if column in ("size", "chunk") else "left",
            no_wrap=column != "release name",
        )
    for row in rows:
        entry = find(str(row["name"]))
        size = entry.size_label if entry else "-"
        mark = (", default" if wide else " *") if row.get("default") else ""
        installed = str(row["installed"]) + mark
        style = "green" if installed.startswith(("yes", "bundled")) else "dim"
        aliases = ", ".join(row["aliases"]) or "-"  # type: ignore[arg-type]
        cells = {
            "alias": escape(aliases), "name": escape(aliases if entry else str(row["name"])),
            "language": str(row["language"]), "lang": str(row["language"]),
            "engine": str(row["engine"]).replace("sherpa-onnx", "sherpa" if not wide else
                                                "sherpa-onnx"),
            "kind": str(row["kind"]), "tokens": str(row["token_type"]),
            "chunk": str(row["chunk_label"]) if wide else _short_chunks(str(row["chunk_label"])),
            "size": size,
            "installed": f"[{style}]{escape(installed)}[/{style}]",
            "release name": escape(str(row["name"])),
        }
        table.add_row(*(cells[c] for c in (FULL_COLUMNS if wide else NARROW_COLUMNS)))
    console.print(table)
    note(
        f"cache: {escape(str(cache))}\nchunk: audio per encoder step (Zipformer: fixed by "
        "the export; NeMo: one per trained look-ahead). * / default: what commands use "
        "without --model. engine nemo: for the NeMo engine "
        "(a .nemo file). Sizes are downloads; ~ marks estimates. Pull one with "
        "`streamasr models pull ALIAS`.",
        highlight=False,
    )


@contextmanager
def _progress_bar(label: str) -> Iterator[tuple[ProgressFn, install.StageFn]]:
    """A Rich download bar on stderr, handed to the store as a plain callback."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=not err_console.is_terminal,
        disable=not err_console.is_terminal,
    )
    task: TaskID = progress.add_task(escape(label), total=None)

    def update(done: int, total: int | None) -> None:
        progress.update(task, completed=done, total=total)

    def stage(text: str) -> None:
        progress.update(task, description=escape(f"{label}: {text}"))

    with progress:
        yield update, stage


@models_app.command("pull")
def pull(
    name: NameArg,
    url: Annotated[
        str | None, typer.Option(help="Download from this address instead (a mirror).")
    ] = None,
    archive: Annotated[
        Path | None,
        typer.Option(help="Install from a .tar.bz2 (or a .nemo) you already have (no network "
                     "needed)."),
    ] = None,
    sha256: Annotated[
        str | None,
        typer.Option("--sha256", help="Expected archive sha256 (overrides the catalog's)."),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Reinstall even if the model is present; discards a "
                     "partial download."),
    ] = False,
    max_unpacked_mb: Annotated[
        float | None,
        typer.Option(
            "--max-unpacked-mb",
            help="Most MB the model may unpack to (default: see docs/models.md).",
        ),
    ] = None,
    max_download_mb: Annotated[
        float | None,
        typer.Option(
            "--max-download-mb",
            help="Most MB a download may bring (default: see docs/models.md).",
        ),
    ] = None,
    accept_new_checksum: Annotated[
        bool,
        typer.Option(
            "--accept-new-checksum",
            help="Install an archive whose sha256 differs from the one pinned, and pin it.",
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            help="Seconds under 16 KB that make a download stalled (resumed).",
        ),
    ] = DEFAULT_TIMEOUT_S,
    make_default: Annotated[
        bool,
        typer.Option("--default", help="Then make it the default (`models default`)."),
    ] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Download a model into the cache: resumable, checksummed, unpacked safely.

    Prints the model folder on stdout, so `dir=$(streamasr models pull en)` works.
    """
    setup_logging(verbose)
    with cli_errors():
        result = pull_with_progress(
            name, url=url, archive=archive, sha256=sha256, force=force,
            max_unpacked_mb=max_unpacked_mb, timeout_s=timeout,
            max_download_mb=max_download_mb, accept_new_checksum=accept_new_checksum,
        )
        if result.already_installed:
            err_console.print(
                f"{result.name} is already installed; `streamasr models verify {name}` checks "
                "it, --force reinstalls it",
                highlight=False,
                markup=False,
            )
        else:
            _report_pull(result, name)
        if make_default:
            _set_default(name)
        typer.echo(str(result.directory))


def pull_with_progress(name: str, **options: Any) -> install.PullResult:
    """`pull` with a progress bar on stderr; a stop signal says what is kept."""
    received = [0]

    def counting(done: int, total: int | None) -> None:
        received[0] = done
        progress(done, total)

    try:
        with _progress_bar(name) as (progress, stage):
            return install.pull(
                name, progress=counting, stage=stage, hooks=install_hooks(), **options
            )
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: say what is kept, then stop
        err_console.print(
            f"stopped: {received[0] / (1 << 20):.1f} MB downloaded so far is kept; run the "
            "same pull again to resume",
            highlight=False, markup=False,
        )
        raise


def offer_download(model: str | None) -> None:
    """A catalog model that is not pulled yet: on a terminal, ask, then pull it with a
    progress bar; without a terminal, leave it to the loader's one-line error."""
    entry = find(model) if model else None
    if model is None or entry is None or find_cached(model) is not None:
        return
    if not (sys.stdin.isatty() and err_console.is_terminal):
        return
    size = entry.size_label.lstrip("~")
    if not typer.confirm(
        f"{model} ({entry.name}, {size}) is not downloaded yet; download it now?",
        default=False, err=True,
    ):
        raise ModelError(f"{model} is not downloaded; run `streamasr models pull {model}`")
    result = pull_with_progress(model)
    _report_pull(result, model)


def _set_default(name: str) -> None:
    from streamasr import config

    path = config.set_value("model", name)
    err_console.print(f"default model: {name} (in {path})", highlight=False, markup=False)


@models_app.command("default")
def default(
    name: Annotated[
        str | None,
        typer.Argument(help="A bundled or pulled model's name, a model folder or a .nemo file; "
                       "none: print the current default."),
    ] = None,
) -> None:
    """The model every command uses when --model is not given (kept in the config file)."""
    from streamasr import config

    with cli_errors():
        if name is None:
            settings = config.load()
            typer.echo(settings.model or (list_bundled() or ["tiny-en"])[0])
            return
        local = Path(name).expanduser()
        if local.exists():
            name = str(local.resolve())
        elif name not in list_bundled() and find_cached(name) is None:
            entry = find(name)
            if entry is not None:
                raise UsageError(
                    f"{name} is not downloaded yet; run `streamasr models pull {name} --default`"
                )
            from streamasr.distribution.catalog import did_you_mean

            raise UsageError(f"unknown model {name!r}; {did_you_mean(name, list_bundled())}")
        _set_default(name)


def _report_pull(result: install.PullResult, name: str) -> None:
    if result.resumed_from_bytes:
        err_console.print(
            f"resumed a partial download at {result.resumed_from_bytes / (1 << 20):.1f} MB",
            highlight=False,
        )
    if result.checksum_source == "catalog":
        check = f"archive sha256 {result.archive_sha256}: matches the catalog"
    elif result.checksum_source == "--sha256":
        check = f"archive sha256 {result.archive_sha256}: matches --sha256"
    elif result.checksum_source == "pinned":
        check = (
            f"archive sha256 {result.archive_sha256}: matches the sha256 pinned at the "
            "first download"
        )
    elif result.replaced_sha256:
        check = (
            f"archive sha256 {result.archive_sha256}: pinned now, replacing "
            f"{result.replaced_sha256} (--accept-new-checksum)"
        )
    else:
        check = (
            "archive checksum: not published in catalog; recorded on first download: "
            f"{result.archive_sha256}"
        )
    err_console.print(
        f"installed {result.name}: {result.files} files, "
        f"{result.installed_bytes / (1 << 20):.1f} MB\n{check}\n"
        f"file checksums recorded in {MANIFEST_NAME}; "
        f"check them with `streamasr models verify {name}`",
        highlight=False,
        markup=False,
    )


@models_app.command("verify")
def verify(
    name: Annotated[
        str,
        typer.Argument(help="A pulled model's alias or name, or a model folder's path."),
    ],
    record: Annotated[
        bool,
        typer.Option("--record", help="For a folder of your own (not pulled): record the "
                     "sha256, size and mtime of its files in it, so that every later use "
                     "refuses it if one changes."),
    ] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Re-hash a model's files against the checksums recorded for it: at the pull, or by
    `verify PATH --record` for a folder of your own.

    Exit status 1 if any file is missing or changed.
    """
    setup_logging(verbose)
    with cli_errors():
        folder = folder_argument(name)
        if record:
            if folder is None:
                raise UsageError(
                    f"--record takes a model folder's path; {name!r} is not a folder here "
                    "(a pulled model's checksums were recorded when it was pulled)"
                )
            count = record_folder(folder)
            err_console.print(
                f"recorded {count} files of {folder} in {folder / MANIFEST_NAME}; every use "
                f"now checks them, and `streamasr models verify {folder}` hashes them again",
                highlight=False, markup=False,
            )
            return
        if folder is not None and not (folder / MANIFEST_NAME).is_file():
            raise ModelError(
                f"{folder} has no recorded checksums ({MANIFEST_NAME}); record them with "
                f"`streamasr models verify {folder} --record`"
            )
        report = verify_folder(folder) if folder is not None else verify_installed(name)
    for rel in report.missing:
        typer.echo(f"missing  {rel}")
    for rel in report.changed:
        typer.echo(f"changed  {rel}")
    for rel in report.extra:
        typer.echo(f"extra    {rel} (not in the manifest; ignored)")
    label = str(folder) if folder is not None else report.name
    if not report.local:
        origin = {
            "catalog": "matched the catalog",
            "--sha256": "matched --sha256",
            "pinned": "matched the sha256 pinned at the first download",
        }.get(report.archive_checksum, "not published in catalog; recorded on first download")
        err_console.print(
            f"archive sha256 {report.archive_sha256} ({origin})", highlight=False
        )
    if report.ok:
        typer.echo(f"ok: {report.checked} files of {label} match the manifest")
        return
    bad = len(report.missing) + len(report.changed)
    fix = (f"restore them, or if the change is yours, record the folder again with "
           f"`streamasr models verify {folder} --record`"
           if report.local
           else f"run `streamasr models pull {name} --force` to reinstall")
    typer.echo(
        f"FAILED: {bad} of {report.checked} files of {label} are missing or changed; {fix}",
        file=sys.stdout,
    )
    raise typer.Exit(1)


@models_app.command("path")
def path(name: NameArg) -> None:
    """Print a pulled or bundled model's folder (for scripts); exit 1 if there is none."""
    with cli_errors():
        if find_cached(name) is None and name in list_bundled():
            typer.echo(str(bundled_models_dir() / name))
            return
        typer.echo(str(require_cached(name)))
