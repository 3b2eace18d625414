"""Loading a model decides its backend once, and looks a name up in the catalog table once.

Both setup paths are driven for real (the bundled tiny-en through sherpa-onnx): the library's
`open_model` and the commands' `build`. The registry's `choose_backend` is wrapped by a
counter that calls the real function, so what loads is what would load without it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from streamasr.api import open_model
from streamasr.backends import registry
from streamasr.commands.options import ModelOptions, build
from streamasr.distribution import catalog


def counted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    calls: list[tuple[object, ...]] = []
    real: Callable[..., registry.BackendEntry] = registry.choose_backend

    def choose_backend(*args: object, **kwargs: object) -> registry.BackendEntry:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(registry, "choose_backend", choose_backend)
    return calls


@pytest.mark.parametrize("model", ["tiny-en"])
def test_open_model_chooses_the_backend_once(
    monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    calls = counted(monkeypatch)
    loaded = open_model(model, threads=1)
    assert loaded.recognizer.info.backend == "sherpa-onnx"
    assert len(calls) == 1, calls


def test_the_commands_build_chooses_the_backend_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counted(monkeypatch)
    recognizer, _ = build(ModelOptions(model="tiny-en", threads=1), paced=False)
    assert recognizer.info.backend == "sherpa-onnx"
    assert len(calls) == 1, calls


def test_a_catalog_name_is_scanned_once_per_process() -> None:
    catalog.find.cache_clear()
    first = catalog.find("en-20M")
    assert first is not None and first is catalog.find("en-20M")
    info = catalog.find.cache_info()
    assert (info.misses, info.hits) == (1, 1)
    # the answers are the table's: aliases match case-insensitively, release names exactly
    for entry in catalog.CATALOG:
        assert catalog.find(entry.name) is entry
        for alias in entry.aliases:
            assert catalog.find(alias.upper()) is entry
    assert catalog.find("no-such-model") is None
