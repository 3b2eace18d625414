"""Each engine owns its released models: the catalog keeps their settings opaque, and a third
engine with a release of its own (tests/toy_release_backend.py) needs its module, its catalog
entry and one registry line; `latency` and `models list` then read it through the engine."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import toy_release_backend as toy
from typer.testing import CliRunner

from streamasr.backends import registry
from streamasr.cli import app
from streamasr.commands import models
from streamasr.distribution import catalog


@pytest.fixture
def toy_release(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    builtin = registry._builtin
    monkeypatch.setattr(registry, "_builtin", lambda: [*builtin(), toy.BACKEND])  # the line
    table = (*catalog.CATALOG, toy.RELEASE)  # its catalog entry
    monkeypatch.setattr(catalog, "CATALOG", table)
    monkeypatch.setattr(models, "CATALOG", table)
    catalog.find.cache_clear()
    yield
    catalog.find.cache_clear()


def test_latency_asks_the_engine_its_release_names(toy_release: None) -> None:
    assert registry.choose_backend("toy-en").name == "toy"
    done = CliRunner().invoke(app, ["latency", "--model", "toy-en", "-f", "json"])
    assert done.exit_code == 0, done.output
    lines = {line["key"]: line["value"] for line in json.loads(done.stdout)["lines"]}
    assert lines == {"chunk_ms": 160}
    other = CliRunner().invoke(app, ["latency", "--model", "toy-en", "--chunk", "24", "-f", "json"])
    assert json.loads(other.stdout)["lines"][0]["value"] == 480
    bad = CliRunner().invoke(app, ["latency", "--model", "toy-en", "--chunk", "16"])
    assert bad.exit_code == 2 and "released with chunks [8, 24]" in bad.output


def test_models_list_shows_what_the_engine_reads(toy_release: None) -> None:
    done = CliRunner().invoke(app, ["models", "list", "--format", "json"])
    assert done.exit_code == 0, done.output
    row = next(m for m in json.loads(done.stdout)["models"] if m["name"] == toy.RELEASE.name)
    assert row["engine"] == "toy" and row["chunks"] == [8, 24]
    assert row["chunk_label"] == "160/480 ms" and row["toy_frames"] == [8, 24]
