"""The bundled random test models are what the scripts make, on any x86-64 machine.

Why: models/README.md promises that ``scripts/make_test_models.py`` and
``scripts/make_token_models.py`` regenerate the committed files. Bytes are the wrong thing to
compare: torch draws normal weights through SIMD code paths (AVX2 vs AVX-512 give a few ULP
apart) and the ONNX exporter folds constants through the CPU's BLAS, so an Intel and an AMD
machine write encoders whose weights differ in the last bits. What must hold everywhere, and
what is checked here: the same files, text files byte-identical, every ONNX graph identical
(nodes, attributes, inputs, outputs, metadata, opsets), every weight of the same shape and type
within a small tolerance, and the same decoded tokens on the bundled clips.

The tests need the optional PyPI ``zipformer`` package (installed with ``--no-deps`` by
scripts/test.sh, see models/README.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import soundfile as sf
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
SUBDIRS = ("tiny-random-transducer", "tiny-random-ctc")
# one model per token type, made by scripts/make_token_models.py
TOKEN_SUBDIRS = (
    "tiny-random-cjkchar",
    "tiny-random-cjkchar-bpe",
    "tiny-random-bpe",
    "tiny-random-byte",
)
# CI regenerates one model per script, the long run (`pytest --long`, scripts/long_tests.sh)
# all of them: the token models differ only in their vocabulary and are made by the same export
# code as the chunk-16 transducer (the one CI checks also writes a bpe.vocab); the CTC model
# is what the other script makes by different code.
CI_SUBDIRS = ("tiny-random-ctc",)
CI_TOKEN_SUBDIRS = ("tiny-random-cjkchar-bpe",)
CLIPS = sorted((MODELS / "tiny-en" / "test_wavs").glob("*.wav"))
# float weights may differ by a few ULP per operation across CPUs (see the module docstring);
# 1e-4 relative is far above that and far below any change a code edit would make
RTOL, ATOL = 1e-4, 1e-6


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _require_zipformer() -> None:
    # find_spec, not importorskip: importing the package needs scripts/zf_compat.py first.
    if importlib.util.find_spec("zipformer") is None:
        pytest.fail("the zipformer package is missing: run scripts/test.sh (see models/README.md)")


def _chosen(config: pytest.Config, ci: tuple[str, ...], every: tuple[str, ...]) -> tuple[str, ...]:
    return every if config.getoption("--long") else ci


def _regenerate(script: str, out_dir: Path, names: tuple[str, ...]) -> None:
    only = [arg for name in names for arg in ("--only", name)]
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), "--out-dir", str(out_dir), *only],
        check=True,
        capture_output=True,
        timeout=600,
    )


def _attribute_value(attr: onnx.AttributeProto) -> object:
    """An attribute as a comparable value; tensors as arrays (compared with tolerance)."""
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, onnx.GraphProto):
        return _graph_outline(value)
    if isinstance(value, list) and value and isinstance(value[0], onnx.TensorProto):
        return [numpy_helper.to_array(v) for v in value]
    return value


def _graph_outline(graph: onnx.GraphProto) -> list[tuple[object, ...]]:
    """Every node with its wiring and attributes, in order."""
    return [
        (
            node.op_type,
            node.domain,
            tuple(node.input),
            tuple(node.output),
            tuple((a.name, _attribute_value(a)) for a in node.attribute),
        )
        for node in graph.node
    ]


def _same_values(made: object, committed: object, where: str) -> None:
    """Equal, with floats within tolerance and everything else exact."""
    if isinstance(committed, np.ndarray):
        assert isinstance(made, np.ndarray), where
        assert made.dtype == committed.dtype and made.shape == committed.shape, where
        if np.issubdtype(committed.dtype, np.floating):
            np.testing.assert_allclose(made, committed, rtol=RTOL, atol=ATOL, err_msg=where)
        else:
            np.testing.assert_array_equal(made, committed, err_msg=where)
    elif isinstance(committed, (list, tuple)):
        assert isinstance(made, (list, tuple)) and len(made) == len(committed), where
        for i, (a, b) in enumerate(zip(made, committed, strict=True)):
            _same_values(a, b, f"{where}[{i}]")
    else:
        assert made == committed, where


def assert_same_onnx(made_path: Path, committed_path: Path) -> None:
    """Same graph and metadata exactly; weights within tolerance."""
    made, committed = onnx.load(str(made_path)), onnx.load(str(committed_path))
    name = committed_path.name
    assert made.ir_version == committed.ir_version, name
    assert list(made.opset_import) == list(committed.opset_import), name
    assert {p.key: p.value for p in made.metadata_props} == {
        p.key: p.value for p in committed.metadata_props
    }, name
    assert list(made.graph.input) == list(committed.graph.input), name
    assert list(made.graph.output) == list(committed.graph.output), name
    _same_values(_graph_outline(made.graph), _graph_outline(committed.graph), f"{name} nodes")
    made_weights = {t.name: t for t in made.graph.initializer}
    committed_weights = {t.name: t for t in committed.graph.initializer}
    assert sorted(made_weights) == sorted(committed_weights), name
    for key, tensor in committed_weights.items():
        _same_values(
            numpy_helper.to_array(made_weights[key]), numpy_helper.to_array(tensor),
            f"{name}:{key}",
        )


def assert_same_folder(made: Path, committed: Path) -> None:
    """Same file names; text byte-identical; ONNX files equal in graph and (nearly) weights."""
    names = sorted(p.name for p in committed.iterdir())
    assert sorted(p.name for p in made.iterdir()) == names, committed.name
    for name in names:
        if name.endswith(".onnx"):
            assert_same_onnx(made / name, committed / name)
        else:
            assert _sha256(made / name) == _sha256(committed / name), f"{committed.name}/{name}"


def decoded_tokens(folder: Path, chunk: int) -> list[tuple[str, ...]]:
    """The final token sequence of each bundled clip, through the real engine."""
    import streamasr

    model = streamasr.open_model(str(folder), threads=1, chunk=chunk)
    result = []
    for clip in CLIPS:
        audio, rate = sf.read(clip, dtype="float32")
        summary = model.transcribe(audio, rate, clip.name)
        result.append(tuple(token for final in summary.finals for token in final.tokens))
    return result


def chunks_of(folder: Path) -> list[int]:
    return sorted({int(p.name.split("-chunk-")[1].split("-")[0]) for p in folder.glob("*.onnx")})


def assert_same_decoding(made: Path, committed: Path) -> None:
    for chunk in chunks_of(committed):
        expected = decoded_tokens(committed, chunk)
        assert any(expected), f"{committed.name} decodes nothing: the check would be empty"
        assert decoded_tokens(made, chunk) == expected, f"{committed.name} chunk {chunk}"


def test_make_test_models_reproduces_committed_models(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    _require_zipformer()
    chosen = _chosen(pytestconfig, CI_SUBDIRS, SUBDIRS)
    _regenerate("make_test_models.py", tmp_path, chosen)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(chosen)
    for sub in chosen:
        assert_same_folder(tmp_path / sub, MODELS / sub)
        assert_same_decoding(tmp_path / sub, MODELS / sub)


def test_make_token_models_reproduces_committed_models(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    _require_zipformer()
    chosen = _chosen(pytestconfig, CI_TOKEN_SUBDIRS, TOKEN_SUBDIRS)
    _regenerate("make_token_models.py", tmp_path, chosen)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(chosen)
    for sub in chosen:
        assert_same_folder(tmp_path / sub, MODELS / sub)
        assert_same_decoding(tmp_path / sub, MODELS / sub)


def _perturbed_copy(src: Path, dest: Path, scale: float) -> None:
    """Copy an ONNX file with its first large float weight scaled by (1 + scale)."""
    model = onnx.load(str(src))
    for tensor in model.graph.initializer:
        array = numpy_helper.to_array(tensor)
        if np.issubdtype(array.dtype, np.floating) and array.size >= 64:
            tensor.CopyFrom(numpy_helper.from_array(array * (1 + scale), tensor.name))
            break
    onnx.save(model, str(dest))


def test_the_comparison_tolerates_ulps_and_catches_real_changes(tmp_path: Path) -> None:
    """The check must pass a few-ULP difference and fail a real weight change."""
    committed = MODELS / "tiny-random-transducer" / "joiner-epoch-0-avg-1-chunk-16-left-64.onnx"
    ulps = tmp_path / "ulps.onnx"
    _perturbed_copy(committed, ulps, 4 * float(np.finfo(np.float32).eps))
    assert _sha256(ulps) != _sha256(committed)
    assert_same_onnx(ulps, committed)
    changed = tmp_path / "changed.onnx"
    _perturbed_copy(committed, changed, 0.01)
    with pytest.raises(AssertionError):
        assert_same_onnx(changed, committed)


def test_readme_lists_the_committed_checksums() -> None:
    readme = (MODELS / "README.md").read_text(encoding="utf-8")
    for sub in SUBDIRS + TOKEN_SUBDIRS:
        for path in sorted((MODELS / sub).iterdir()):
            assert f"{_sha256(path)}  {sub}/{path.name}" in readme
