"""Read a streaming encoder's export settings from its ONNX metadata, without running it.

A sherpa-onnx streaming Zipformer fixes its chunk and look-ahead when it is exported, and
writes them into the ONNX file's metadata (`decode_chunk_len`, `T`, `left_context_len`).
Everything the latency arithmetic needs is there, so reading it is enough: no session, no
inference, no onnxruntime, and not even the weights: the file is mapped into memory and its
protobuf walked field by field, jumping over the initializers, so a 260 MB encoder costs what a
2 MB one does (only the pages the walk touches are ever read).
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol, overload

from streamasr.errors import ModelError

log = logging.getLogger("streamasr")

#: Frames of the 100 Hz fbank features per 50 Hz "chunk" frame (icefall's convention).
FBANK_FRAMES_PER_CHUNK_FRAME = 2


@dataclass(frozen=True)
class EncoderMetadata:
    """What an exported streaming encoder says about itself.

    `decode_chunk_len` and `T` count 100 Hz fbank frames: the encoder advances by
    `decode_chunk_len` frames per step but reads `T` frames, so `T - decode_chunk_len` frames
    are look-ahead that no attention mask shows.
    """

    path: Path
    model_type: str
    decode_chunk_len: int
    T: int  # named as the export writes it, so the reader can grep for it
    left_context_len: tuple[int, ...]
    raw: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def chunk(self) -> int:
        """Chunk in 50 Hz frames, the `--chunk` convention: decode_chunk_len / 2."""
        return self.decode_chunk_len // FBANK_FRAMES_PER_CHUNK_FRAME

    @property
    def lookahead_frames(self) -> int:
        """Fbank frames read past the chunk: the front end's look-ahead (13 for zipformer2)."""
        return self.T - self.decode_chunk_len

    @property
    def left_context(self) -> int:
        """Left context of the first (50 Hz) encoder stack, in 50 Hz frames; 0 if not given."""
        return self.left_context_len[0] if self.left_context_len else 0


@dataclass(frozen=True)
class TensorInfo:
    """One graph input or output: its name, ONNX element type and shape.

    A dimension is an int when fixed, its symbolic name (e.g. "N") when dynamic, and ""
    when the file says nothing about it.
    """

    name: str
    elem_type: int
    shape: tuple[int | str, ...]


@dataclass(frozen=True)
class OnnxHeader:
    """What an ONNX file says about itself, read without touching its weights."""

    metadata: dict[str, str]
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]

    def output(self, name: str) -> TensorInfo | None:
        """The graph output called `name`, if there is one."""
        return next((o for o in self.outputs if o.name == name), None)


# Protobuf field numbers used below (onnx.proto): ModelProto.graph = 7,
# ModelProto.metadata_props = 14; GraphProto.input = 11, output = 12 (initializer = 5 and
# node = 1 hold the weights and are seeked over); ValueInfoProto.name = 1, type = 2;
# TypeProto.tensor_type = 1; TypeProto.Tensor.elem_type = 1, shape = 2;
# TensorShapeProto.dim = 1; Dimension.dim_value = 1, dim_param = 2;
# StringStringEntryProto.key = 1, value = 2.
_MODEL_GRAPH, _MODEL_METADATA = 7, 14
_GRAPH_INPUT, _GRAPH_OUTPUT = 11, 12
#: Largest small message (one metadata entry, one input/output description) read whole.
_MAX_SMALL_MESSAGE = 1 << 20


class _WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


def _varint_in(buf: _Buffer, pos: int, end: int) -> tuple[int, int]:
    """A protobuf varint at buf[pos] that ends before `end`, and the position after it."""
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _WireError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes):
    """(field number, wire type, value) of one in-memory message; value is int or bytes."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint_in(data, pos, end)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint_in(data, pos, end)
        elif wire == 1 or wire == 5:
            size = 8 if wire == 1 else 4
            if pos + size > len(data):
                raise _WireError("truncated fixed-size field")
            value, pos = data[pos:pos + size], pos + size
        elif wire == 2:
            length, pos = _varint_in(data, pos, end)
            if pos + length > len(data):
                raise _WireError("length-delimited field runs past its message")
            value, pos = data[pos:pos + length], pos + length
        else:
            raise _WireError(f"wire type {wire} is not used by ONNX")
        if number == 0:
            raise _WireError("field number 0")
        yield number, wire, value


class _Buffer(Protocol):
    """What the walk reads from: bytes, a memory map, or _FileBuffer (an open file)."""

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> bytes: ...


class _FileBuffer:
    """An open file read as a buffer, a page at a time, for callers that hand over a file
    object; files by path are memory-mapped instead (_mapped)."""

    _PAGE = 4096

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self._pages: dict[int, bytes] = {}

    def _page(self, number: int) -> bytes:
        page = self._pages.get(number)
        if page is None:
            if len(self._pages) > 64:
                self._pages.clear()
            self._f.seek(number * self._PAGE)
            page = self._pages[number] = self._f.read(self._PAGE)
        return page

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> bytes: ...

    def __getitem__(self, index: int | slice) -> int | bytes:
        if isinstance(index, int):
            page = self._page(index // self._PAGE)
            offset = index % self._PAGE
            if offset >= len(page):
                raise _WireError("read past the end of the file (truncated?)")
            return page[offset]
        start, stop = index.start, index.stop
        parts = []
        while start < stop:
            page = self._page(start // self._PAGE)
            offset = start % self._PAGE
            chunk = page[offset:offset + stop - start]
            if not chunk:
                break
            parts.append(chunk)
            start += len(chunk)
        return b"".join(parts)


@contextmanager
def _mapped(path: Path) -> Iterator[tuple[_Buffer, int]]:
    """The file mapped read-only (bytes for an empty file), with its size."""
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield b"", 0
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            yield mapped, size


def _walk(buf: _Buffer, pos: int, end: int, wanted: set[int]) -> Iterator[tuple[int, int, int]]:
    """Walk the fields of the message in buf[pos:end], jumping over the rest.

    Yields (number, offset, length) for each length-delimited field in `wanted`; every other
    field is jumped over, so its bytes are never read (for a memory map: never paged in).
    """
    while pos < end:
        key, pos = _varint_in(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _WireError("field number 0")
        if wire == 0:
            _, pos = _varint_in(buf, pos, end)
            continue
        if wire == 1 or wire == 5:
            length = 8 if wire == 1 else 4
        elif wire == 2:
            length, pos = _varint_in(buf, pos, end)
        else:
            raise _WireError(f"wire type {wire} is not used by ONNX")
        if pos + length > end:
            raise _WireError("field runs past the end of the file (truncated?)")
        if wire == 2 and number in wanted:
            yield number, pos, length
        pos += length


def _read_small(buf: _Buffer, start: int, length: int) -> bytes:
    if length > _MAX_SMALL_MESSAGE:
        raise _WireError(f"a {length}-byte field where a small description was expected")
    return buf[start:start + length]


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _WireError("a string field is not UTF-8") from exc


def _tensor_info(data: bytes) -> TensorInfo:
    name, elem_type, shape = "", 0, []
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            name = _text(value)
        elif number == 2 and wire == 2:  # TypeProto
            for t_num, t_wire, t_val in _fields(value):
                if t_num != 1 or t_wire != 2:  # only tensor_type
                    continue
                for n, w, v in _fields(t_val):
                    if n == 1 and w == 0:
                        elem_type = v
                    elif n == 2 and w == 2:  # TensorShapeProto
                        shape = [_dimension(d) for dn, dw, d in _fields(v) if dn == 1 and dw == 2]
    return TensorInfo(name, elem_type, tuple(shape))


def _dimension(data: bytes) -> int | str:
    dim: int | str = ""
    for number, wire, value in _fields(data):
        if number == 1 and wire == 0:
            dim = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 2 and wire == 2:
            dim = _text(value)
    return dim


def _metadata_entry(data: bytes) -> tuple[str, str]:
    key = value = ""
    for number, wire, raw in _fields(data):
        if number == 1 and wire == 2:
            key = _text(raw)
        elif number == 2 and wire == 2:
            value = _text(raw)
    return key, value


def parse_onnx_header(f: BinaryIO, size: int) -> OnnxHeader:
    """Read metadata_props and graph inputs/outputs from an open ONNX file of `size` bytes.

    Why a reader of our own: `onnx.load` parses every initializer, so reading one encoder's
    metadata cost its whole size in memory and time (~360 MB for a release-like folder).
    Here only the few small fields are read; weights are jumped over, never read.
    """
    return _header(_FileBuffer(f), size)


def _header(buf: _Buffer, size: int) -> OnnxHeader:
    metadata: dict[str, str] = {}
    inputs: list[TensorInfo] = []
    outputs: list[TensorInfo] = []
    for number, start, length in _walk(buf, 0, size, {_MODEL_GRAPH, _MODEL_METADATA}):
        if number == _MODEL_METADATA:
            key, value = _metadata_entry(_read_small(buf, start, length))
            metadata[key] = value
            continue
        for g_number, g_start, g_length in _walk(
            buf, start, start + length, {_GRAPH_INPUT, _GRAPH_OUTPUT}
        ):
            info = _tensor_info(_read_small(buf, g_start, g_length))
            (inputs if g_number == _GRAPH_INPUT else outputs).append(info)
    return OnnxHeader(metadata, tuple(inputs), tuple(outputs))


def _metadata_props(buf: _Buffer, size: int) -> dict[str, str]:
    """Only metadata_props: the graph is one field of the model, jumped over whole."""
    metadata: dict[str, str] = {}
    for _, start, length in _walk(buf, 0, size, {_MODEL_METADATA}):
        key, value = _metadata_entry(_read_small(buf, start, length))
        metadata[key] = value
    return metadata


def _unreadable(path: Path, exc: Exception) -> ModelError:
    return ModelError(
        f"{path} is not a readable ONNX file ({exc}); "
        "download the model again or point at the encoder .onnx file"
    )


def read_onnx_header(path: str | Path) -> OnnxHeader:
    """`parse_onnx_header` on a file, with damage reported as a ModelError that says what to do."""
    path = Path(path)
    try:
        with _mapped(path) as (buf, size):
            return _header(buf, size)
    except (_WireError, OSError, ValueError) as exc:
        raise _unreadable(path, exc) from exc


# Where tensors can live in external files (onnx.proto): GraphProto.node = 1,
# initializer = 5, sparse_initializer = 15; NodeProto.attribute = 5; AttributeProto.t = 5,
# g = 6, tensors = 10, graphs = 11, sparse_tensor = 22, sparse_tensors = 23;
# SparseTensorProto.values = 1, indices = 2; TensorProto.external_data = 13.
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_SPARSE = 1, 5, 15
_NODE_ATTRIBUTE = 5
_ATTR_TENSORS, _ATTR_GRAPHS = {5, 10}, {6, 11}
_ATTR_SPARSE = {22, 23}
_TENSOR_EXTERNAL = 13
#: Subgraphs (If, Loop, Scan bodies) nested deeper than this are refused, not followed.
_MAX_GRAPH_DEPTH = 32


def _tensor_locations(buf: _Buffer, start: int, end: int) -> list[str]:
    found = []
    for _, s_start, length in _walk(buf, start, end, {_TENSOR_EXTERNAL}):
        key, value = _metadata_entry(_read_small(buf, s_start, length))
        if key == "location":
            found.append(value)
    return found


def _graph_locations(buf: _Buffer, pos: int, end: int, depth: int) -> list[str]:
    if depth > _MAX_GRAPH_DEPTH:
        raise _WireError(f"subgraphs nested more than {_MAX_GRAPH_DEPTH} deep")
    found: list[str] = []
    wanted = {_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_SPARSE}
    for number, start, length in _walk(buf, pos, end, wanted):
        if number == _GRAPH_INITIALIZER:
            found += _tensor_locations(buf, start, start + length)
        elif number == _GRAPH_SPARSE:
            for _, s_start, s_len in _walk(buf, start, start + length, {1, 2}):
                found += _tensor_locations(buf, s_start, s_start + s_len)
        else:
            for _, a_start, a_len in _walk(buf, start, start + length, {_NODE_ATTRIBUTE}):
                found += _attribute_locations(buf, a_start, a_start + a_len, depth)
    return found


def _attribute_locations(buf: _Buffer, pos: int, end: int, depth: int) -> list[str]:
    found: list[str] = []
    wanted = _ATTR_TENSORS | _ATTR_GRAPHS | _ATTR_SPARSE
    for number, start, length in _walk(buf, pos, end, wanted):
        if number in _ATTR_TENSORS:
            found += _tensor_locations(buf, start, start + length)
        elif number in _ATTR_GRAPHS:
            found += _graph_locations(buf, start, start + length, depth + 1)
        else:
            for _, s_start, s_len in _walk(buf, start, start + length, {1, 2}):
                found += _tensor_locations(buf, s_start, s_start + s_len)
    return found


#: The bytes of an external-data entry's key ("location", field 1 of a StringStringEntry):
#: a file without them names no external file, so the walk below is not needed.
_LOCATION_KEY = b"\x0a\x08location"
#: Up to this size a file is scanned for that key before it is walked. The scan costs its
#: bytes (~0.5 ms per MB), the walk its nodes and initializers: an int8 full-size encoder
#: (66 MB, many small nodes) scans 4x faster than it walks, an fp32 one (248 MB) walks faster.
_SCAN_LIMIT_BYTES = 128 << 20


def external_data_locations(path: str | Path) -> tuple[str, ...]:
    """Every file name the model's tensors say their bytes live in (external data).

    Why: onnxruntime opens these relative to the model's folder, so a location such as
    `../../home/user/.ssh/id_rsa` makes loading a model read a file outside it. A file whose
    bytes hold no "location" key names none (one scan at memory speed, of the pages the
    engine is about to read anyway, for files up to _SCAN_LIMIT_BYTES); any other file is
    walked like the header, the weights jumped over and only the small location entries read.
    """
    path = Path(path)
    found: list[str] = []
    try:
        with _mapped(path) as (buf, size):
            if size == 0:
                return ()
            if size <= _SCAN_LIMIT_BYTES and buf.find(_LOCATION_KEY) < 0:  # type: ignore[attr-defined]
                return ()
            for _, start, length in _walk(buf, 0, size, {_MODEL_GRAPH}):
                found += _graph_locations(buf, start, start + length, 0)
    except (_WireError, OSError, ValueError) as exc:
        raise _unreadable(path, exc) from exc
    return tuple(dict.fromkeys(found))


def _load_metadata_props(path: Path) -> dict[str, str]:
    """The ONNX file's metadata_props as a dict, read at a cost independent of its size
    (nor of its number of nodes: the graph is jumped over whole)."""
    try:
        with _mapped(path) as (buf, size):
            return _metadata_props(buf, size)
    except (_WireError, OSError, ValueError) as exc:
        raise _unreadable(path, exc) from exc


def _int(raw: dict[str, str], key: str, path: Path) -> int:
    """One integer metadata field, with an error that says which export is expected."""
    if key not in raw:
        raise ModelError(
            f"{path.name} has no '{key}' in its ONNX metadata, so it is not a sherpa-onnx "
            f"streaming Zipformer encoder export (keys found: {', '.join(sorted(raw)) or 'none'}); "
            "pass the encoder-*.onnx file of a streaming model"
        )
    try:
        return int(raw[key])
    except ValueError as exc:
        raise ModelError(f"{path.name}: metadata '{key}'={raw[key]!r} is not an integer") from exc


def read_encoder_metadata(path: str | Path) -> EncoderMetadata:
    """Read `model_type`, `decode_chunk_len`, `T` and `left_context_len` from an encoder file."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"encoder file {path} does not exist; check the model directory")
    raw = _load_metadata_props(path)
    decode_chunk_len = _int(raw, "decode_chunk_len", path)
    t_frames = _int(raw, "T", path)
    if decode_chunk_len <= 0 or t_frames < decode_chunk_len:
        raise ModelError(
            f"{path.name}: metadata decode_chunk_len={decode_chunk_len}, T={t_frames} is "
            "inconsistent (need 0 < decode_chunk_len <= T); the export is damaged"
        )
    left_text = raw.get("left_context_len", "").strip()
    try:
        left = tuple(int(v) for v in left_text.split(",") if v.strip()) if left_text else ()
    except ValueError as exc:
        raise ModelError(
            f"{path.name}: metadata left_context_len={left_text!r} is not a list of integers"
        ) from exc
    meta = EncoderMetadata(
        path=path,
        model_type=raw.get("model_type", "unknown"),
        decode_chunk_len=decode_chunk_len,
        T=t_frames,
        left_context_len=left,
        raw=raw,
    )
    log.debug(
        "%s: model_type=%s decode_chunk_len=%d T=%d left_context_len=%s",
        path.name, meta.model_type, meta.decode_chunk_len, meta.T, left,
    )
    return meta
