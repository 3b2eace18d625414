"""Open a `.nemo` ourselves before NeMo does: a model file is data, never code.

Why: NeMo's `restore_from` instantiates whatever `_target_` the archive's YAML names (a
function under `nemo.collections.asr.parts` that writes a file of the config's choosing is
enough to plant a `.pth` in site-packages), reads tokenizer files from any path the config
gives, and unpickles the checkpoint with whatever `torch.load`'s environment says
(`TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1` lets a pickle run code). So here the archive is unpacked
by the store's safe tar reader into a private folder, its config is parsed by a safe YAML
loader under size and alias limits, every class it names is held to an allowlist and every
file it names to the archive's own files. NeMo then restores from that folder with the
config checked here (so it reads exactly the bytes checked) and a weights-only checkpoint.

yaml, torch and nemo are imported inside functions: `import streamasr` must not need them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from streamasr.errors import ModelError

log = logging.getLogger("streamasr")

CONFIG_NAME = "model_config.yaml"
WEIGHTS_NAME = "model_weights.ckpt"
#: Real configs are 5-100 kB (the vocabulary is listed three times); 4 MB is no config.
MAX_CONFIG_BYTES = 4 << 20
#: Configs NeMo writes use no YAML aliases; a few are tolerated, a bomb needs many.
MAX_ALIASES = 64
#: Values in the config with every alias expanded: a bomb stops here, within a second.
MAX_CONFIG_NODES = 500_000
#: A .nemo may unpack to this many times its own size (a plain tar: 1x), at least MIN_CAP.
UNPACK_FACTOR = 4
MIN_UNPACK_BYTES = 64 << 20
TRUST_OPTION = "--trust-model-config"

_MODELS = "nemo.collections.asr.models"
_MODULES = "nemo.collections.asr.modules"
_LOSSES = "nemo.collections.asr.losses"
_TOKENIZERS = "nemo.collections.common.tokenizers"
#: The classes a cache-aware FastConformer `.nemo` names (NVIDIA's released hybrid, RNNT and
#: CTC BPE models and the bundled tiny ones), by the short and the full module path.
ALLOWED_TARGETS = frozenset({
    f"{_MODELS}.EncDecHybridRNNTCTCBPEModel",
    f"{_MODELS}.hybrid_rnnt_ctc_bpe_models.EncDecHybridRNNTCTCBPEModel",
    f"{_MODELS}.EncDecRNNTBPEModel",
    f"{_MODELS}.rnnt_bpe_models.EncDecRNNTBPEModel",
    f"{_MODELS}.EncDecCTCModelBPE",
    f"{_MODELS}.ctc_bpe_models.EncDecCTCModelBPE",
    f"{_MODULES}.AudioToMelSpectrogramPreprocessor",
    f"{_MODULES}.audio_preprocessing.AudioToMelSpectrogramPreprocessor",
    f"{_MODULES}.SpectrogramAugmentation",
    f"{_MODULES}.audio_preprocessing.SpectrogramAugmentation",
    f"{_MODULES}.ConformerEncoder",
    f"{_MODULES}.conformer_encoder.ConformerEncoder",
    f"{_MODULES}.RNNTDecoder",
    f"{_MODULES}.rnnt.RNNTDecoder",
    f"{_MODULES}.RNNTJoint",
    f"{_MODULES}.rnnt.RNNTJoint",
    f"{_MODULES}.ConvASRDecoder",
    f"{_MODULES}.conv_asr.ConvASRDecoder",
    f"{_LOSSES}.CTCLoss",
    f"{_LOSSES}.ctc.CTCLoss",
    f"{_LOSSES}.rnnt.RNNTLoss",
    f"{_TOKENIZERS}.SentencePieceTokenizer",
    f"{_TOKENIZERS}.sentencepiece_tokenizer.SentencePieceTokenizer",
})
#: Keys whose value NeMo (hydra, or its own `from_config_dict`) imports and calls.
TARGET_KEYS = ("_target_", "target", "cls")
#: Tokenizer kinds that read only SentencePiece files (others fetch from the network).
ALLOWED_TOKENIZER_TYPES = ("bpe", "agg")
#: Sections NeMo reads only when training, never on restore (their paths are the trainer's).
TRAINING_SECTIONS = frozenset({"train_ds", "validation_ds", "test_ds", "optim"})
#: Keys naming files to read besides those ending in _path, _file, filepath or _dir.
PATH_KEYS = frozenset({"dir", "ngram_lm_model", "kenlm_model", "lm_path"})
# `${a.b}` refers to another value; `${name:args}` calls a resolver, which is code
_REFERENCE = re.compile(r"\$\{[A-Za-z0-9_.\[\]-]*\}")


@dataclass(frozen=True)
class VettedModel:
    """A `.nemo` unpacked into `directory`, with the config that was checked."""

    source: Path
    directory: Path
    config: dict
    trusted_targets: tuple[str, ...]  # names outside the allowlist let in by the option


def _refuse(path: Path, why: str, fix: str) -> ModelError:
    return ModelError(f"refusing to load {path.name}: {why}; {fix}")


def _untrusted(path: Path, why: str) -> ModelError:
    return _refuse(
        path, why,
        f"a cache-aware FastConformer .nemo needs nothing else. If you trust the file, load "
        f"it with --model FILE {TRUST_OPTION}, which runs the code it names",
    )


def unpack_cap_bytes(path: Path) -> int:
    """How many bytes a .nemo may unpack to (see the constants)."""
    return max(UNPACK_FACTOR * path.stat().st_size, MIN_UNPACK_BYTES)


def _open_nemo(path: Path) -> tarfile.TarFile:
    """The archive as NeMo writes it, a plain tar or a gzip one (what NeMo itself reads).

    Not "r:*": that also tries bz2 and xz, and xz's legacy format takes any bytes, so a
    file of zeros would be decompressed, gigabytes of it, before it is refused."""
    try:
        return tarfile.open(path, "r:")
    except tarfile.ReadError:
        return tarfile.open(path, "r:gz")


def unpack(path: Path, dest: Path) -> None:
    """Unpack the archive into the empty folder `dest` with the store's safe tar reader."""
    from streamasr.distribution.extract import safe_extract

    cap = unpack_cap_bytes(path)
    try:  # a first pass over the headers: readable at all, and within the cap
        with _open_nemo(path) as tar:
            files = [member.size for member in tar if member.isfile()]
        if not files:  # e.g. a file of zeros, which a tar reader takes as an empty archive
            raise tarfile.ReadError("no files in it")
        total = sum(files)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0].rstrip(":")
        raise ModelError(
            f"NeMo could not load {path}: it is not a readable tar archive ({first}). "
            "Check that it is a complete .nemo file"
        ) from exc
    if total > cap:
        raise _refuse(
            path, f"it unpacks to {total >> 20} MB, more than the {cap >> 20} MB allowed "
            f"({UNPACK_FACTOR}x its size, at least {MIN_UNPACK_BYTES >> 20} MB)",
            "a .nemo is an uncompressed or gzip tar of its weights; use the file as released",
        )
    safe_extract(path, dest, cap)


def read_config(path: Path, directory: Path) -> dict:
    """The archive's model_config.yaml, parsed safely under size, alias and node limits."""
    import yaml

    config_path = directory / CONFIG_NAME
    if not config_path.is_file():
        raise ModelError(
            f"NeMo could not load {path}: it has no {CONFIG_NAME}. "
            "Check that it is a complete .nemo file"
        )
    with open(config_path, "rb") as handle:  # the store wrote it: a regular file, no link
        data = handle.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise _refuse(
            path, f"its {CONFIG_NAME} is larger than {MAX_CONFIG_BYTES >> 20} MB "
            "(real ones are under 100 kB)", "use the file as released",
        )
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        text = data.decode("utf-8")
        aliases = sum(isinstance(e, yaml.AliasEvent) for e in yaml.parse(text, Loader=loader))
        if aliases > MAX_ALIASES:
            raise _refuse(
                path, f"its {CONFIG_NAME} uses {aliases} YAML aliases (a config NeMo writes "
                "uses none; this many is how a file expands to gigabytes)",
                "use the file as released",
            )
        config = yaml.load(text, Loader=loader)  # a safe loader: plain data only
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        problem = str(exc).replace("\n", " ")
        raise _refuse(
            path, f"its {CONFIG_NAME} is not plain YAML data ({problem})",
            "use the file as released",
        ) from exc
    if not isinstance(config, dict):
        raise _refuse(path, f"its {CONFIG_NAME} is not a mapping", "use the file as released")
    _count_nodes(path, config)
    return config


def _count_nodes(path: Path, config: dict) -> None:
    """Walk the config as NeMo would expand it, stopping once it is too large."""
    budget = MAX_CONFIG_NODES
    stack: list[object] = [config]
    while stack:
        node = stack.pop()
        budget -= 1
        if budget < 0:
            raise _refuse(
                path, f"its {CONFIG_NAME} expands to more than {MAX_CONFIG_NODES} values "
                "(a YAML alias bomb)", "use the file as released",
            )
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def check_config(path: Path, config: dict, directory: Path, trust: bool) -> tuple[str, ...]:
    """Refuse code and files the config names; returns unlisted names `trust` lets in.

    Rewrites each tokenizer's `dir` to `directory`, so that NeMo's fallbacks stay inside it.
    """
    trusted: list[str] = []

    def code(why: str, name: str) -> None:
        if not trust:
            raise _untrusted(path, why)
        trusted.append(name)

    def walk(node: object, where: str, in_tokenizer: bool) -> None:
        if isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, f"{where}[{index}]", in_tokenizer)
            return
        if not isinstance(node, dict):
            if isinstance(node, str) and "${" in _REFERENCE.sub("", node):
                code(f"{where} calls an OmegaConf resolver ({node[:60]!r})", node)
            return
        if in_tokenizer:
            kind = node.get("type")
            if isinstance(kind, str) and kind.lower() not in ALLOWED_TOKENIZER_TYPES:
                code(f"{where}.type is tokenizer type {kind!r}", f"tokenizer type {kind}")
            if "dir" in node:
                node["dir"] = str(directory)
        for key, value in node.items():
            at = f"{where}.{key}" if where else str(key)
            if where in ("", "model") and key in TRAINING_SECTIONS:
                continue
            if key in TARGET_KEYS and value is not None:
                if not isinstance(value, str) or value not in ALLOWED_TARGETS:
                    code(f"{at} names {value!r}, which is not a model part streamasr knows",
                         str(value))
                continue
            if isinstance(value, str):
                _check_file_value(path, directory, at, str(key), value, in_tokenizer)
            walk(value, at, in_tokenizer or key == "tokenizer")

    walk(config, "", False)
    return tuple(trusted)


def _check_file_value(path: Path, directory: Path, at: str, key: str, value: str,
                      in_tokenizer: bool) -> None:
    """A value naming a file must name one of the archive's own (`nemo:NAME`)."""
    if value.startswith("nemo:"):
        name = value[len("nemo:"):]
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            raise _refuse(path, f"{at} ({value!r}) points outside the archive",
                          "a .nemo's files are named nemo:NAME; use the file as released")
        if not (directory / name).is_file():
            raise _refuse(path, f"{at} names {value!r}, which the archive does not hold",
                          "check that it is a complete .nemo file")
        return
    names_file = (
        key in PATH_KEYS or key.endswith(("_path", "_file", "filepath", "_dir"))
    )
    if not names_file or not value or (in_tokenizer and key == "dir"):
        return
    raise _refuse(
        path, f"{at} names the file {value!r} outside the archive",
        "a model may read only its own files (nemo:NAME); use the file as released",
    )


@contextlib.contextmanager
def opened(path: Path, trust: bool = False, warn: bool = True) -> Iterator[VettedModel]:
    """Unpack and check `path` in a private temporary folder, removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="streamasr-nemo-"))  # mode 0700
    try:
        unpack(path, directory)
        config = read_config(path, directory)
        trusted = check_config(path, config, directory, trust)
        if not (directory / WEIGHTS_NAME).is_file():
            raise ModelError(
                f"NeMo could not load {path}: it has no {WEIGHTS_NAME}. "
                "Check that it is a complete .nemo file"
            )
        for name in trusted if warn else ():
            log.warning(
                "%s names %s, outside what streamasr knows; loading it because of %s",
                path.name, name, TRUST_OPTION,
            )
        yield VettedModel(path, directory, config, trusted)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def check_file(path: Path) -> None:
    """Check a `.nemo` without loading it (`models pull`); needs only PyYAML.

    The archive, the YAML and the files it names are checked; the classes it names are
    checked when it is loaded (a pull runs nothing, and --trust-model-config is a load's).
    """
    try:
        import yaml  # noqa: F401
    except ImportError:
        log.debug("PyYAML is not installed: %s is checked when it is loaded", path.name)
        return
    with opened(path, trust=True, warn=False):
        pass


@contextlib.contextmanager
def weights_only_loads() -> Iterator[None]:
    """torch.load refuses pickled code while this lasts, whatever the environment said."""
    saved = {k: os.environ.get(k) for k in (
        "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_WEIGHTS_ONLY_LOAD")}
    if saved["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"]:
        log.debug("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is ignored while a model loads")
    os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def restore(nemo_asr, torch, vetted: VettedModel, device: str):
    """`ASRModel.restore_from` on a checked folder and config, with a weights-only checkpoint."""
    import pickle

    from nemo.core.connectors.save_restore_connector import SaveRestoreConnector
    from omegaconf import OmegaConf

    class _WeightsOnly(SaveRestoreConnector):
        """Reads the checkpoint as tensors only; a pickle's code never runs."""

        @staticmethod
        def _load_state_dict_from_disk(model_weights, map_location=None):
            return torch.load(model_weights, map_location=map_location, weights_only=True)

    connector = _WeightsOnly()
    connector.model_extracted_dir = str(vetted.directory)
    try:
        with weights_only_loads():
            return nemo_asr.models.ASRModel.restore_from(
                str(vetted.directory), override_config_path=OmegaConf.create(vetted.config),
                map_location=torch.device(device), save_restore_connector=connector,
            )
    except pickle.UnpicklingError as exc:
        detail = [line.split("error:", 1)[-1].strip().rstrip(".")
                  for line in str(exc).splitlines()
                  if "WeightsUnpickler error" in line or "GLOBAL" in line]
        raise _refuse(
            vetted.source, f"its {WEIGHTS_NAME} holds pickled objects besides tensors "
            f"({detail[0] if detail else 'not a weights-only checkpoint'})",
            "a checkpoint is loaded weights-only, whatever TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD "
            "says; use the file as released",
        ) from exc
