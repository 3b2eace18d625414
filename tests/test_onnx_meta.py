"""The ONNX header reader: same answers as `onnx.load`, without reading the weights."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from streamasr.backends.sherpa.onnx_meta import (
    parse_onnx_header,
    read_encoder_metadata,
    read_onnx_header,
)
from streamasr.errors import ModelError

MODELS = Path(__file__).resolve().parent.parent / "models"
BUNDLED = sorted(MODELS.glob("*/*.onnx"))


def _dims(value_info: onnx.ValueInfoProto) -> tuple[int | str, ...]:
    dims = []
    for dim in value_info.type.tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(dim.dim_value)
        elif dim.HasField("dim_param"):
            dims.append(dim.dim_param)
        else:
            dims.append("")
    return tuple(dims)


def _described(values) -> list[tuple[str, int, tuple[int | str, ...]]]:
    return [(v.name, v.type.tensor_type.elem_type, _dims(v)) for v in values]


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_header_equals_onnx_load_on_bundled_models(path: Path) -> None:
    model = onnx.load(str(path))
    header = read_onnx_header(path)
    assert header.metadata == {p.key: p.value for p in model.metadata_props}
    assert [(i.name, i.elem_type, i.shape) for i in header.inputs] == _described(model.graph.input)
    assert [(o.name, o.elem_type, o.shape) for o in header.outputs] == _described(
        model.graph.output
    )
    assert header.outputs, "every bundled model has outputs"


def test_bundled_model_list_is_not_empty() -> None:
    assert len(BUNDLED) >= 10


class _CountingFile(io.RawIOBase):
    """A raw file that counts the bytes handed out, so a test can see what was read."""

    def __init__(self, path: Path) -> None:
        self._f = path.open("rb", buffering=0)
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._f.readinto(buffer)
        self.bytes_read += n or 0
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        self._f.close()
        super().close()


def _model_with_big_weights(path: Path, weight_bytes: int) -> dict[str, str]:
    """An encoder-like file: a large initializer, metadata written after the graph."""
    weights = np.arange(weight_bytes // 4, dtype=np.float32)
    init = numpy_helper.from_array(weights, name="w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", weights.size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", weights.size])],
        initializer=[init],
    )
    model = helper.make_model(graph)
    props = {"model_type": "zipformer2", "decode_chunk_len": "32", "T": "45",
             "left_context_len": "64,32,16,8,16,32"}
    helper.set_model_props(model, props)
    onnx.save(model, str(path))
    return props


def test_weights_are_seeked_over_not_read(tmp_path: Path) -> None:
    path = tmp_path / "big.onnx"
    props = _model_with_big_weights(path, 40 << 20)
    size = path.stat().st_size
    assert size > 40 << 20
    raw = _CountingFile(path)
    with io.BufferedReader(raw) as f:
        header = parse_onnx_header(f, size)
    assert header.metadata == props
    assert header.inputs[0].shape == ("N", (40 << 20) // 4)
    assert raw.bytes_read < 64 << 10, f"read {raw.bytes_read} of {size} bytes"


def test_initializer_payload_is_never_looked_at(tmp_path: Path) -> None:
    """Overwrite the weights with bytes that are not protobuf: the header still reads."""
    path = tmp_path / "big.onnx"
    props = _model_with_big_weights(path, 4 << 20)
    data = bytearray(path.read_bytes())
    marker = np.arange(4, dtype=np.float32).tobytes()  # the first weights as stored
    start = data.index(marker)
    data[start:start + (4 << 20)] = b"\xff" * (4 << 20)
    path.write_bytes(bytes(data))
    assert read_encoder_metadata(path).raw == props


def test_truncated_file_is_a_model_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.onnx"
    _model_with_big_weights(path, 1 << 20)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="not a readable ONNX file.*truncated"):
        read_onnx_header(path)


@pytest.mark.parametrize(
    "content",
    [b"this is not a protobuf \xff\xfe", b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
     b"\x72\x05\x0a\x03\xff\xfe\xfd"],
    ids=["text", "overlong-varint", "metadata-not-utf8"],
)
def test_damaged_bytes_are_a_model_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelError, match="not a readable ONNX file"):
        read_onnx_header(path)
