"""Released sherpa-onnx streaming models that `streamasr models pull` knows by name.

Each entry is one GitHub release asset of k2-fsa/sherpa-onnx (tag `asr-models`). The
release page publishes no checksums, so `archive_sha256` and `archive_bytes` are filled in
only where the same value is recorded by several independent projects that downloaded the
asset; elsewhere they are None, and the first download records the sha256 of the archive and
of every extracted file in the model's manifest (see `streamasr.store`).

The short aliases are the ones `streamasr latency` accepts (`latency.PUBLISHED_ALIASES`); a
test keeps the two tables in step.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamasr.errors import ModelError

RELEASE_URL = "https://github.com/k2-fsa/sherpa-onnx/releases/download/asr-models/{name}.tar.bz2"


@dataclass(frozen=True)
class CatalogEntry:
    """One released model: where its archive lives and what it is."""

    name: str  # release name, also the archive's top folder and the cache folder
    aliases: tuple[str, ...]
    url: str
    archive_sha256: str | None  # None: not published; recorded on first download
    language: str
    kind: str  # "transducer" or "ctc"
    chunks: tuple[int, ...]  # exported chunk sizes, 50 Hz frames (16 = 320 ms)
    token_type: str  # sherpa-onnx modeling unit: "bpe", "cjkchar+bpe", ...
    size_mb: float  # archive size in MiB (approximate when archive_bytes is None)
    description: str
    archive_bytes: int | None = None  # exact archive size when known

    @property
    def short_name(self) -> str:
        """The alias people type, or the release name when there is none."""
        return self.aliases[0] if self.aliases else self.name

    @property
    def size_label(self) -> str:
        """Archive size for tables: exact when known, else marked approximate."""
        prefix = "" if self.archive_bytes is not None else "~"
        return f"{prefix}{self.size_mb:.0f} MB"


def _release(name: str) -> str:
    return RELEASE_URL.format(name=name)


CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        name="sherpa-onnx-streaming-zipformer-en-2023-06-26",
        aliases=("en",),
        url=_release("sherpa-onnx-streaming-zipformer-en-2023-06-26"),
        archive_sha256="639e25b578e9e997131402199419c13a941f8e4e198e2da1ce57dbf5cf401282",
        language="en",
        kind="transducer",
        chunks=(16,),
        token_type="bpe",
        size_mb=296.0,
        archive_bytes=310_414_022,
        description="Zipformer2 transducer, 66 M params, LibriSpeech; exports with left "
        "context 64 and 128, fp32 and int8.",
    ),
    CatalogEntry(
        name="sherpa-onnx-streaming-zipformer-en-20M-2023-02-17",
        aliases=("en-20M",),
        url=_release("sherpa-onnx-streaming-zipformer-en-20M-2023-02-17"),
        archive_sha256="9c559283e8498d3fe95913c79ca1cb454bb26281ac2b102b41306c7d752765d9",
        language="en",
        kind="transducer",
        chunks=(16,),
        token_type="bpe",
        size_mb=122.0,
        archive_bytes=127_887_156,
        description="Small zipformer (v1) transducer, 20 M params, LibriSpeech; fp32 and int8.",
    ),
    CatalogEntry(
        name="sherpa-onnx-streaming-zipformer-bilingual-zh-en-2023-02-20",
        aliases=("bilingual-zh-en",),
        url=_release("sherpa-onnx-streaming-zipformer-bilingual-zh-en-2023-02-20"),
        archive_sha256="27ffbd9ee24ad186d99acc2f6354d7992b27bcab490812510665fa8f9389c5f8",
        language="zh+en",
        kind="transducer",
        chunks=(16,),
        token_type="cjkchar+bpe",
        size_mb=488.0,
        archive_bytes=511_274_346,
        description="Zipformer (v1) transducer for mixed Mandarin and English speech.",
    ),
    CatalogEntry(
        name="sherpa-onnx-streaming-zipformer-multi-zh-hans-2023-12-12",
        aliases=("multi-zh-hans",),
        url=_release("sherpa-onnx-streaming-zipformer-multi-zh-hans-2023-12-12"),
        archive_sha256=None,
        language="zh",
        kind="transducer",
        chunks=(16,),
        token_type="bpe",
        size_mb=296.0,
        description="Zipformer2 transducer, Mandarin, trained on 14k hours (multi_zh-hans).",
    ),
    CatalogEntry(
        name="sherpa-onnx-streaming-zipformer-ctc-multi-zh-hans-2023-12-13",
        aliases=("ctc-multi-zh-hans",),
        url=_release("sherpa-onnx-streaming-zipformer-ctc-multi-zh-hans-2023-12-13"),
        archive_sha256=None,
        language="zh",
        kind="ctc",
        chunks=(16,),
        token_type="bpe",
        size_mb=236.0,
        description="Zipformer2 CTC, Mandarin, trained on 14k hours (multi_zh-hans).",
    ),
)


def find(name: str) -> CatalogEntry | None:
    """The entry whose release name or alias is `name` (aliases match case-insensitively)."""
    for entry in CATALOG:
        if name == entry.name or name.lower() in (a.lower() for a in entry.aliases):
            return entry
    return None


def known_names() -> str:
    """`alias (release)` for every entry, for error messages."""
    return ", ".join(f"{e.short_name} ({e.name})" for e in CATALOG)


def lookup(name: str) -> CatalogEntry:
    """Like `find`, but an unknown name is an error that lists the catalog."""
    entry = find(name)
    if entry is None:
        raise ModelError(
            f"unknown model {name!r}. Released models: {known_names()}. "
            "For another model, pass --url URL (or --archive FILE) to install it under this name"
        )
    return entry
