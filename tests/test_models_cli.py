"""`streamasr models ...` end to end, and a pulled model transcribing through real sherpa-onnx."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from test_store import TINY, ArchiveServer, cache, server, tiny_archive
from typer.testing import CliRunner

from streamasr.cli import app as main_app
from streamasr.commands import models as models_commands
from streamasr.distribution import catalog
from streamasr.distribution.install import PART_SUFFIX
from streamasr.distribution.manifest import sha256_file

runner = CliRunner()


def _models_app() -> typer.Typer:
    """A root app with only the models group, registered the way cli.py does it."""
    root = typer.Typer()

    @root.callback()
    def _root() -> None:
        """Test root."""

    models_commands.register(root)
    return root


APP = _models_app()
__all__ = ["cache", "server", "tiny_archive"]  # fixtures shared with test_store


def models(*args: str):
    return runner.invoke(APP, ["models", *args])


def test_list_shows_every_released_model_and_what_is_installed(
    cache: Path, tmp_path: Path, tiny_archive: bytes
) -> None:
    result = models("list")
    assert result.exit_code == 0, result.output
    for entry in catalog.CATALOG:
        assert entry.name in result.stdout and entry.short_name in result.stdout
    assert "yes" not in result.stdout

    archive = tmp_path / "a.tar.bz2"
    archive.write_bytes(tiny_archive)
    assert models("pull", "ctc-multi-zh-hans", "--archive", str(archive)).exit_code == 0
    assert models("pull", "my-model", "--archive", str(archive)).exit_code == 0
    data = json.loads(models("list", "--format", "json").stdout)
    state = {row["name"]: row["installed"] for row in data["models"]}
    assert state[catalog.lookup("ctc-multi-zh-hans").name] == "yes"
    assert state[catalog.lookup("en").name] == "no"
    assert state["my-model"] == "yes"  # custom pulls are listed too
    assert data["cache"] == str(cache)
    assert "yes" in models("list").stdout


def test_pull_then_transcribe_with_the_pulled_model(
    server: ArchiveServer, cache: Path, tiny_archive: bytes, speech_16k: Path
) -> None:
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    result = models("pull", "tiny", "--url", url)
    assert result.exit_code == 0, result.output
    directory = Path(result.stdout.strip())
    assert directory == cache / "tiny"
    assert "not published in catalog; recorded on first download" in result.stderr
    assert "models verify tiny" in result.stderr

    def finals(model: str) -> list[str]:
        out = runner.invoke(
            main_app, ["file", str(speech_16k), "--model", model, "--format", "jsonl"]
        )
        assert out.exit_code == 0, out.output
        records = [json.loads(line) for line in out.stdout.splitlines()]
        assert records[-1]["type"] == "summary"
        return [r["text"] for r in records if r["type"] == "final"]

    # The pulled copy is the bundled model byte for byte, so it must decode identically.
    assert finals(str(directory)) == finals(str(TINY))

    path = models("path", "tiny")
    assert path.exit_code == 0 and path.stdout.strip() == str(directory)
    again = models("pull", "tiny", "--url", url)
    assert again.exit_code == 0 and "already installed" in again.stderr


def test_resumed_pull_reports_it(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    url = server.serve("/tiny.tar.bz2", tiny_archive)
    cache.mkdir()
    (cache / f"tiny{PART_SUFFIX}").write_bytes(tiny_archive[:200_000])
    result = models("pull", "tiny", "--url", url)
    assert result.exit_code == 0, result.output
    assert "resumed a partial download" in result.stderr
    assert server.state.requests == [("/tiny.tar.bz2", "bytes=200000-")]


def test_verify_passes_then_fails_after_a_change(
    cache: Path, tmp_path: Path, tiny_archive: bytes
) -> None:
    archive = tmp_path / "a.tar.bz2"
    archive.write_bytes(tiny_archive)
    digest = sha256_file(archive)
    assert models("pull", "tiny", "--archive", str(archive), "--sha256", digest).exit_code == 0
    ok = models("verify", "tiny")
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.startswith("ok: ") and "matched --sha256" in ok.stderr

    (cache / "tiny" / "tokens.txt").write_text("changed")
    bad = models("verify", "tiny")
    assert bad.exit_code == 1
    assert "changed  tokens.txt" in bad.stdout and "--force" in bad.stdout


def test_checksum_mismatch_exits_1_and_leaves_no_model(
    server: ArchiveServer, cache: Path, tiny_archive: bytes
) -> None:
    url = server.serve("/x.tar.bz2", tiny_archive)
    result = models("pull", "en-20M", "--url", url)
    assert result.exit_code == 1
    assert "does not match" in result.stderr and "catalog" in result.stderr
    assert models("path", "en-20M").exit_code == 1
    assert not (cache / catalog.lookup("en-20M").name).exists()


def test_unknown_names_suggest_the_closest_ones(cache: Path) -> None:
    for args in (("pull", "nosuch"), ("path", "nosuch"), ("verify", "nosuch")):
        result = models(*args)
        assert result.exit_code == 1, args
        assert "`streamasr models list` shows" in result.stderr
        assert len(result.stderr) < 300, result.stderr  # one line, not the whole catalog
    for typed, meant in (
        ("english", "en"), ("en-20m-x", "en-20M"), ("bilingual-zh", "bilingual-zh-en")
    ):
        result = models("pull", typed)
        assert result.exit_code == 1, typed
        assert "did you mean" in result.stderr and meant in result.stderr.split("did you mean")[1]


def test_known_but_not_pulled_says_how_to_pull(cache: Path) -> None:
    result = models("path", "en")
    assert result.exit_code == 1
    assert "streamasr models pull en" in result.stderr


def test_404_and_usage_errors(server: ArchiveServer, cache: Path, tmp_path: Path) -> None:
    missing = models("pull", "tiny", "--url", server.url("/nothing.tar.bz2"))
    assert missing.exit_code == 1 and "404" in missing.stderr
    both = models("pull", "tiny", "--url", server.url("/a"), "--archive", str(tmp_path / "a"))
    assert both.exit_code == 2
    fmt = models("list", "--format", "xml")
    assert fmt.exit_code == 2
