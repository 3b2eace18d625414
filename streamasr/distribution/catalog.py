"""The one table of released models: where each lives and the settings it was exported with.

Everything else looks names up here: `models pull` (URL, checksum, size cap), `models list`,
`file --model NAME` (through the cache), and `latency --model NAME` (the release's settings,
so the budget needs no download). Those settings are each engine's own (`engine_data`): only
the engine named in `engine` reads them, through its `released` hook.

Checksums: sherpa-onnx's release page publishes none, so `archive_sha256` is filled in only
where the same value is recorded by several independent projects that downloaded the asset.
For `.nemo` files on Hugging Face it is the sha256 of the Git LFS object that the file page
lists. Everywhere else it is None, and the first download records the sha256 of the archive
and of every installed file in the model's manifest (see `streamasr.distribution.manifest`).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable
from dataclasses import dataclass

from streamasr.errors import ModelError

RELEASE_URL = "https://github.com/k2-fsa/sherpa-onnx/releases/download/asr-models/{name}.tar.bz2"
PUNCT_RELEASE_URL = (
    "https://github.com/k2-fsa/sherpa-onnx/releases/download/punctuation-models/{name}.tar.bz2"
)
HF_FILE_URL = "https://huggingface.co/{repo}/resolve/main/{file}"


@dataclass(frozen=True)
class CatalogEntry:
    """One released model: where it lives, what it is, how it was exported."""

    name: str  # release name: the archive's top folder and the cache folder
    aliases: tuple[str, ...]
    url: str
    archive_sha256: str | None  # None: not published; recorded on first download
    language: str  # "en", "zh", "zh+en"
    kind: str  # "transducer", "ctc", "hybrid" (RNNT + CTC heads); "punctuation" (--punctuate)
    token_type: str  # sherpa-onnx modeling unit: "bpe", "cjkchar", "cjkchar+bpe"
    size_mb: float  # download size in MiB (approximate when archive_bytes is None)
    description: str
    archive_bytes: int | None = None  # exact download size when known
    engine: str = "sherpa-onnx"  # the backend that runs it (backends/registry.py's name)
    # each released setting in its engine's own words, read only by that engine's package
    # (its `released` hook): sherpa-onnx's exports, NeMo's trained att_context_sizes
    engine_data: tuple[tuple[str | int, ...], ...] = ()
    params_m: float | None = None  # millions of parameters, where published
    file_name: str | None = None  # a single-file model (.nemo): its name; None: a tarball

    @property
    def short_name(self) -> str:
        """The alias people type, or the release name when there is none."""
        return self.aliases[0] if self.aliases else self.name

    @property
    def size_label(self) -> str:
        """Download size for tables: exact when known, else marked approximate."""
        prefix = "" if self.archive_bytes is not None else "~"
        return f"{prefix}{self.size_mb:.0f} MB"

    @property
    def single_file(self) -> bool:
        return self.file_name is not None


def _release(name: str) -> str:
    return RELEASE_URL.format(name=name)


def _sherpa_nemo_export(lookahead_ms: int, right: int) -> CatalogEntry:
    """One of NVIDIA's streaming FastConformer models exported for sherpa-onnx (transducer
    head): the three releases differ only in their trained look-ahead."""
    name = f"sherpa-onnx-nemo-streaming-fast-conformer-transducer-en-{lookahead_ms}ms"
    return CatalogEntry(
        name=name,
        aliases=(f"nemo-fc-{lookahead_ms}ms",),
        url=_release(name),
        archive_sha256=None,
        language="en",
        kind="transducer",
        token_type="bpe",
        size_mb=429.0,
        description=f"NeMo stt_en_fastconformer_hybrid_large_streaming_{lookahead_ms}ms exported "
        f"for sherpa-onnx (transducer head): att_context_size [70,{right}], {lookahead_ms} ms "
        "look-ahead.",
        engine_data=(("fastconformer", 70, right),),
        params_m=114.0,
    )


CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        name="sherpa-onnx-streaming-zipformer-en-2023-06-26",
        aliases=("en",),
        url=_release("sherpa-onnx-streaming-zipformer-en-2023-06-26"),
        archive_sha256="639e25b578e9e997131402199419c13a941f8e4e198e2da1ce57dbf5cf401282",
        language="en",
        kind="transducer",
        token_type="bpe",
        size_mb=296.0,
        archive_bytes=310_414_022,
        description="Zipformer2 transducer, 66 M params, LibriSpeech; exports with left "
        "context 64 and 128, fp32 and int8.",
        engine_data=(("zipformer2", 16, 128), ("zipformer2", 16, 64)),
        params_m=66.0,
    ),
    CatalogEntry(
        name="sherpa-onnx-streaming-zipformer-en-20M-2023-02-17",
        aliases=("en-20M",),
        url=_release("sherpa-onnx-streaming-zipformer-en-20M-2023-02-17"),
        archive_sha256="9c559283e8498d3fe95913c79ca1cb454bb26281ac2b102b41306c7d752765d9",
        language="en",
        kind="transducer",
        token_type="bpe",
        size_mb=122.0,
        archive_bytes=127_887_156,
        description="Small zipformer (v1) transducer, 20 M params, LibriSpeech; fp32 and int8.",
        engine_data=(("zipformer", 16, 64),),
        params_m=20.0,
    ),
    CatalogEntry(
        name="sherpa-onnx-streaming-zipformer-en-kroko-2025-08-06",
        aliases=("en-kroko",),
        url=_release("sherpa-onnx-streaming-zipformer-en-kroko-2025-08-06"),
        archive_sha256=None,
        language="en",
        kind="transducer",
        token_type="bpe",
        size_mb=55.0,
        description="Kroko (Banafo) English streaming Zipformer2, 1.28 s chunks: the first "
        "decode comes after about 1.4 s of audio, then one every 1.28 s.",
        engine_data=(("zipformer2", 64, 0),),
    ),
    CatalogEntry(
        name="sherpa-onnx-streaming-zipformer-bilingual-zh-en-2023-02-20",
        aliases=("bilingual-zh-en",),
        url=_release("sherpa-onnx-streaming-zipformer-bilingual-zh-en-2023-02-20"),
        archive_sha256="27ffbd9ee24ad186d99acc2f6354d7992b27bcab490812510665fa8f9389c5f8",
        language="zh+en",
        kind="transducer",
        token_type="cjkchar+bpe",
        size_mb=488.0,
        archive_bytes=511_274_346,
        description="Zipformer (v1) transducer for mixed Mandarin and English speech.",
        engine_data=(("zipformer", 16, 64),),
    ),
    CatalogEntry(
        name="sherpa-onnx-streaming-zipformer-multi-zh-hans-2023-12-12",
        aliases=("multi-zh-hans",),
        url=_release("sherpa-onnx-streaming-zipformer-multi-zh-hans-2023-12-12"),
        archive_sha256=None,
        language="zh",
        kind="transducer",
        token_type="bpe",
        size_mb=296.0,
        description="Zipformer2 transducer, Mandarin, trained on 14k hours (multi_zh-hans).",
        engine_data=(("zipformer2", 16, 128),),
    ),
    CatalogEntry(
        name="sherpa-onnx-streaming-zipformer-ctc-multi-zh-hans-2023-12-13",
        aliases=("ctc-multi-zh-hans",),
        url=_release("sherpa-onnx-streaming-zipformer-ctc-multi-zh-hans-2023-12-13"),
        archive_sha256=None,
        language="zh",
        kind="ctc",
        token_type="bpe",
        size_mb=236.0,
        description="Zipformer2 CTC, Mandarin, trained on 14k hours (multi_zh-hans).",
        engine_data=(("zipformer2", 16, 128),),
    ),
    CatalogEntry(
        name="sherpa-onnx-streaming-zipformer-zh-int8-2025-06-30",
        aliases=("zh-2025",),
        url=_release("sherpa-onnx-streaming-zipformer-zh-int8-2025-06-30"),
        archive_sha256=None,
        language="zh",
        kind="transducer",
        token_type="cjkchar",
        size_mb=160.0,
        description="Newer Mandarin Zipformer2 transducer, int8 only. Its chunk is not "
        "published: chunk 16 is the recipe's default; `latency --model DIR` reads the real one.",
        engine_data=(("zipformer2", 16, 0),),
    ),
    _sherpa_nemo_export(80, 1),
    _sherpa_nemo_export(480, 6),
    _sherpa_nemo_export(1040, 13),
    CatalogEntry(
        name="stt_en_fastconformer_hybrid_large_streaming_multi",
        aliases=("nemo-fastconformer-multi",),
        url=HF_FILE_URL.format(
            repo="nvidia/stt_en_fastconformer_hybrid_large_streaming_multi",
            file="stt_en_fastconformer_hybrid_large_streaming_multi.nemo",
        ),
        archive_sha256="8db5289d5238aca839b84f5afdd66eb1aa64413feb9c2a915940b291012aff8b",
        language="en",
        kind="hybrid",
        token_type="bpe",
        size_mb=459_673_600 / (1 << 20),
        archive_bytes=459_673_600,
        description="NeMo cache-aware FastConformer, hybrid RNNT+CTC, trained with look-ahead "
        "1040/480/80/0 ms ([70,13], [70,6], [70,1], [70,0]); for the NeMo engine.",
        engine="nemo",
        engine_data=((70, 13), (70, 6), (70, 1), (70, 0)),
        params_m=114.0,
        file_name="stt_en_fastconformer_hybrid_large_streaming_multi.nemo",
    ),
    CatalogEntry(
        name="parakeet_realtime_eou_120m-v1",
        aliases=("parakeet-eou-120m",),
        url=HF_FILE_URL.format(
            repo="nvidia/parakeet_realtime_eou_120m-v1",
            file="parakeet_realtime_eou_120m-v1.nemo",
        ),
        archive_sha256=None,
        language="en",
        kind="transducer",
        token_type="bpe",
        size_mb=460.0,
        description="NeMo cache-aware FastConformer RNNT that emits an end-of-utterance "
        "token, att_context_size [70,1] (80 ms look-ahead); for the NeMo engine.",
        engine="nemo",
        engine_data=((70, 1),),
        params_m=120.0,
        file_name="parakeet_realtime_eou_120m-v1.nemo",
    ),
    CatalogEntry(
        name="nemotron-speech-streaming-en-0.6b",
        aliases=("nemotron-streaming-0.6b",),
        url=HF_FILE_URL.format(
            repo="nvidia/nemotron-speech-streaming-en-0.6b",
            file="nemotron-speech-streaming-en-0.6b.nemo",
        ),
        archive_sha256=None,
        language="en",
        kind="transducer",
        token_type="bpe",
        size_mb=2358.0,
        description="NVIDIA Nemotron Speech Streaming, cache-aware FastConformer RNNT, 0.6 B; "
        "chunks 80-1120 ms ([70,0], [70,1], [70,6], [70,13]); for the NeMo engine.",
        engine="nemo",
        engine_data=((70, 13), (70, 6), (70, 1), (70, 0)),
        params_m=600.0,
        file_name="nemotron-speech-streaming-en-0.6b.nemo",
    ),
    CatalogEntry(
        name="sherpa-onnx-online-punct-en-2024-08-06",
        aliases=("punct-en",),
        url=PUNCT_RELEASE_URL.format(name="sherpa-onnx-online-punct-en-2024-08-06"),
        archive_sha256=None,
        language="en",
        kind="punctuation",
        token_type="bpe",
        size_mb=29.2,
        description="English punctuation (, . ?) and casing of finals: CNN-BiLSTM from "
        "Edge-Punct-Casing, model.onnx and model.int8.onnx. Not a speech model: use it with "
        "`streamasr file --punctuate punct-en`.",
    ),
)


@functools.cache
def find(name: str) -> CatalogEntry | None:
    """The entry whose release name or alias is `name` (aliases match case-insensitively).

    Loading a model asks this from several places (the backend choice, the model folder,
    the cache); the table is scanned once per name and process.
    """
    for entry in CATALOG:
        if name == entry.name or name.lower() in (a.lower() for a in entry.aliases):
            return entry
    return None


def close_names(name: str, others: Iterable[str] = (), count: int = 3) -> list[str]:
    """Up to `count` model names a user may have meant: aliases, release names and `others`
    (bundled or cached names); prefixes first ('english' -> 'en'), then similar spellings."""
    names = [n for e in CATALOG for n in (*e.aliases, e.name)] + list(others)
    wanted = name.lower()
    prefixed = [n for n in names if wanted.startswith(n.lower()) or n.lower().startswith(wanted)]
    similar = difflib.get_close_matches(name, names, n=count, cutoff=0.5)
    return list(dict.fromkeys(prefixed + similar))[:count]


def did_you_mean(name: str, others: Iterable[str] = ()) -> str:
    """'did you mean en, en-20M?' or a pointer to the list, for one-line errors."""
    close = close_names(name, others)
    if close:
        return f"did you mean {', '.join(close)}? (`streamasr models list` shows them all)"
    return "`streamasr models list` shows the known models"


def lookup(name: str) -> CatalogEntry:
    """Like `find`, but an unknown name is an error that suggests the closest names."""
    entry = find(name)
    if entry is None:
        raise ModelError(
            f"unknown model {name!r}; {did_you_mean(name)}. For another model, pass --url URL "
            "(or --archive FILE) to install it under this name"
        )
    return entry
