"""Models are data, not code: a crafted model file is refused before it can act.

Each attack is a real file: a copy of the bundled tiny NeMo model (or a sherpa-onnx folder)
with one thing changed, run through the CLI in a fresh process. Every case must end with
the expected exit code, one line on stderr naming the problem and the fix, nothing on
stdout, and no marker file where the attack would have written one. Each run is its own
process, forked from one that imported torch and NeMo once (`warm_nemo`, tests/warm_nemo.py):
a run that loads a checkpoint no longer pays NeMo's import. That a refused file never imports
torch is shown by the one test that starts a fresh interpreter.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import pytest
import yaml
from warm_nemo import WarmNemo

from streamasr.backends.nemo import archive as nemo_archive
from streamasr.backends.sherpa.onnx_meta import external_data_locations
from streamasr.errors import ModelError

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "models"
STREAMING = MODELS / "tiny-nemo-streaming" / "tiny-nemo-streaming.nemo"
CLIP = MODELS / "tiny-en" / "test_wavs" / "1.wav"
WRITE_MANIFEST = "nemo.collections.asr.parts.utils.manifest_utils.write_manifest"
HARMLESS_UNLISTED = "nemo.collections.asr.modules.MaskedPatchAugmentation"


@pytest.fixture
def cli(warm_nemo: WarmNemo) -> Callable[..., subprocess.CompletedProcess]:
    """`streamasr ARGS` in its own process, forked from one that imported NeMo once."""
    return warm_nemo.cli


def assert_refused(result: subprocess.CompletedProcess, *words: str, code: int = 1) -> str:
    """Exit `code`, nothing on stdout, exactly one line on stderr holding `words`."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == code, result.stderr
    assert result.stdout == ""
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def base_config() -> dict:
    with tarfile.open(STREAMING) as tar:
        member = next(m for m in tar if m.name.endswith("model_config.yaml"))
        return yaml.safe_load(tar.extractfile(member).read())  # type: ignore[union-attr]


def craft(
    out: Path,
    edit: Callable[[dict], None] | None = None,
    *,
    config_text: str | None = None,
    replace: dict[str, bytes] | None = None,
    extra: tuple[tuple[tarfile.TarInfo, bytes | None], ...] = (),
) -> Path:
    """A copy of the bundled streaming .nemo with its config or members changed."""
    replace = dict(replace or {})
    if edit is not None:
        config = base_config()
        edit(config)
        config_text = yaml.safe_dump(config, allow_unicode=True, sort_keys=False)
    if config_text is not None:
        replace["model_config.yaml"] = config_text.encode("utf-8")
    with tarfile.open(STREAMING) as src, tarfile.open(out, "w") as dst:
        for member in src:
            name = PurePosixPath(member.name).name
            if member.isfile():
                data = replace.pop(name, None)
                if data is None:
                    data = src.extractfile(member).read()  # type: ignore[union-attr]
                info = tarfile.TarInfo(member.name)
                info.size = len(data)
                dst.addfile(info, io.BytesIO(data))
            else:
                dst.addfile(member)
        for info, data in extra:
            if data is not None:
                info.size = len(data)
            dst.addfile(info, io.BytesIO(data) if data is not None else None)
    return out


def function_target(marker: Path, content: str = "x") -> dict:
    """A config section that makes NeMo call write_manifest(marker, ...)."""
    return {"_target_": WRITE_MANIFEST, "output_path": str(marker),
            "target_manifest": [{"line": content}]}


# ----- YAML naming code ---------------------------------------------------------------


def test_a_nemo_function_as_target_is_refused_before_it_runs(tmp_path, cli):
    marker = tmp_path / "written-by-the-model"
    evil = craft(tmp_path / "evil.nemo", lambda c: c.update(preprocessor=function_target(marker)))
    line = assert_refused(
        cli("file", str(CLIP), "--model", str(evil)),
        "refusing to load evil.nemo", "preprocessor._target_", WRITE_MANIFEST,
        "--trust-model-config",
    )
    assert "runs the code it names" in line
    assert not marker.exists()


def test_a_pth_write_into_a_site_folder_is_refused(tmp_path, cli):
    site = tmp_path / "site-packages"
    site.mkdir()
    pth = site / "evil.pth"
    payload = f"import os; open({str(tmp_path / 'ran')!r}, 'w').close()"

    def edit(config: dict) -> None:
        config["encoder"]["extra"] = [function_target(pth, payload)]  # nested in a list

    evil = craft(tmp_path / "pth.nemo", edit)
    assert_refused(
        cli("file", str(CLIP), "--model", str(evil)), "encoder.extra[0]._target_",
        WRITE_MANIFEST,
    )
    assert not pth.exists()
    assert not (tmp_path / "ran").exists()


def test_the_top_level_target_is_held_to_the_list_too(tmp_path, cli):
    marker = tmp_path / "written"
    evil = craft(tmp_path / "top.nemo", lambda c: c.update(target=WRITE_MANIFEST,
                                                            output_path=str(marker)))
    assert_refused(cli("file", str(CLIP), "--model", str(evil)), "target names", WRITE_MANIFEST)
    assert not marker.exists()


def test_an_omegaconf_resolver_is_code_too(tmp_path, cli):
    evil = craft(tmp_path / "resolver.nemo",
                 lambda c: c["preprocessor"].update(window="${oc.env:HOME}"))
    assert_refused(cli("file", str(CLIP), "--model", str(evil)),
                   "preprocessor.window calls an OmegaConf resolver", "--trust-model-config")


# ----- files the config names ------------------------------------------------------------


@pytest.mark.parametrize("value, words", [
    ("nemo:../../../../etc/passwd", "points outside the archive"),
    ("/etc/passwd", "names the file '/etc/passwd' outside the archive"),
    ("nemo:missing_tokenizer.model", "which the archive does not hold"),
])
def test_tokenizer_files_must_be_the_archives_own(tmp_path, value, words, cli):
    evil = craft(tmp_path / "tok.nemo", lambda c: c["tokenizer"].update(model_path=value))
    assert_refused(cli("file", str(CLIP), "--model", str(evil)), "tokenizer.model_path", words)


# ----- YAML bombs and size --------------------------------------------------------------


def bomb(levels: int, fan: int) -> str:
    """A YAML 'billion laughs': each level lists `fan` aliases of the one before."""
    lines = ["lol0: &l0 [" + ", ".join(["lol"] * fan) + "]"]
    for level in range(1, levels + 1):
        refs = ", ".join([f"*l{level - 1}"] * fan)
        lines.append(f"lol{level}: &l{level} [{refs}]")
    return "\n".join(lines) + "\n"


def original_text() -> str:
    return yaml.safe_dump(base_config(), allow_unicode=True, sort_keys=False)


@pytest.mark.parametrize("levels, fan, words", [
    (9, 9, "YAML aliases"),  # 81 aliases: over the alias limit
    (7, 8, "expands to more than"),  # 56 aliases, 8**8 values: under it, caught expanding
])
def test_an_alias_bomb_is_refused_within_seconds(tmp_path, levels, fan, words, cli):
    evil = craft(tmp_path / "bomb.nemo", config_text=original_text() + bomb(levels, fan))
    start = time.monotonic()
    result = cli("file", str(CLIP), "--model", str(evil))
    assert time.monotonic() - start < 120  # torch's import is most of it
    assert_refused(result, "refusing to load bomb.nemo", words)


@pytest.mark.parametrize("levels, fan", [(9, 9), (7, 8), (40, 2)])
def test_the_bomb_check_is_fast_and_small(tmp_path, levels, fan):
    evil = craft(tmp_path / "bomb.nemo", config_text=original_text() + bomb(levels, fan))
    tracemalloc.start()
    start = time.monotonic()
    with pytest.raises(ModelError, match="alias|expands"), nemo_archive.opened(evil):
        pass
    elapsed = time.monotonic() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 10
    assert peak < 64 << 20


def test_an_oversized_config_is_refused(tmp_path, cli):
    padding = "# " + "x" * 1000 + "\n"
    text = original_text() + padding * (5 * 1024)
    evil = craft(tmp_path / "big.nemo", config_text=text)
    assert_refused(cli("file", str(CLIP), "--model", str(evil)), "larger than 4 MB")


def test_yaml_python_tags_are_refused(tmp_path, cli):
    marker = tmp_path / "tagged"
    text = original_text() + f"x: !!python/object/apply:os.system ['touch {marker}']\n"
    evil = craft(tmp_path / "tag.nemo", config_text=text)
    assert_refused(cli("file", str(CLIP), "--model", str(evil)), "is not plain YAML data")
    assert not marker.exists()


# ----- the archive itself ------------------------------------------------------------------


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "hardlink"])
def test_traversal_and_links_inside_the_nemo_are_refused(tmp_path, kind, cli):
    marker = tmp_path / "escaped"
    depth = "../" * (len(marker.parts) + 4)
    extra = {
        "dotdot": ((_member(depth + str(marker).lstrip("/")), b"out"),),
        "absolute": ((_member(str(marker)), b"out"),),
        "symlink": ((_member("./link", tarfile.SYMTYPE, str(marker)), None),
                    (_member("./link/x"), b"out")),
        "hardlink": ((_member("./hard", tarfile.LNKTYPE, "/etc/passwd"), None),),
    }[kind]
    evil = craft(tmp_path / f"{kind}.nemo", extra=extra)
    assert_refused(cli("file", str(CLIP), "--model", str(evil)), "refusing to unpack",
                   "malicious")
    assert not marker.exists()


def test_a_compressed_nemo_that_unpacks_to_too_much_is_refused_before_unpacking(tmp_path):
    import gzip

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.addfile(_member("./model_weights.ckpt"), None)  # empty
        zeros = _member("./zeros")
        zeros.size = 100 << 20
        tar.addfile(zeros, io.BytesIO(bytes(zeros.size)))
    bomb_file = tmp_path / "zeros.nemo"
    bomb_file.write_bytes(gzip.compress(buffer.getvalue()))
    with pytest.raises(ModelError, match="unpacks to 100 MB, more than the 64 MB allowed"), \
            nemo_archive.opened(bomb_file):
        pass


def test_not_a_tar_archive_is_one_line(tmp_path, cli):
    broken = tmp_path / "broken.nemo"
    broken.write_bytes(b"no tar here" * 100)
    assert_refused(cli("file", str(CLIP), "--model", str(broken)), "NeMo could not load",
                   "complete .nemo file")


# ----- the checkpoint -----------------------------------------------------------------


class Payload:
    """Pickles as a call to os.system: what a malicious checkpoint holds."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_payload_does_not_run_even_when_the_environment_asks(tmp_path, warm_nemo, cli):
    import torch

    marker = tmp_path / "pickle-ran"
    buffer = io.BytesIO()
    torch.save({"encoder.payload": Payload(marker)}, buffer)
    evil = craft(tmp_path / "pickle.nemo", replace={"model_weights.ckpt": buffer.getvalue()})
    env = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    assert_refused(
        cli("file", str(CLIP), "--model", str(evil), env=env),
        "model_weights.ckpt holds pickled objects besides tensors", "posix.system",
    )
    assert not marker.exists()
    # the control: the same bytes, loaded the way the environment asks, do run the payload
    ckpt = tmp_path / "model_weights.ckpt"
    ckpt.write_bytes(buffer.getvalue())
    warm_nemo.python(f"import torch; torch.load({str(ckpt)!r})", env=env, timeout=300)
    assert marker.exists()


# ----- models pull ---------------------------------------------------------------------


@pytest.mark.parametrize("attack", ["traversal", "function"])
def test_pull_archive_refuses_a_crafted_nemo_and_installs_nothing(tmp_path, attack, cli):
    marker = tmp_path / "escaped"
    if attack == "traversal":
        extra = ((_member("../" * (len(marker.parts) + 4) + str(marker).lstrip("/")), b"out"),)
        evil, words = craft(tmp_path / "evil.nemo", extra=extra), "climbs out"
    else:  # a pull does not hold classes to the list, but the file it writes is outside
        evil = craft(tmp_path / "evil.nemo",
                     lambda c: c.update(preprocessor=function_target(marker)))
        words = "preprocessor.output_path names the file"
    home = tmp_path / "cache"
    result = cli("models", "pull", "evilmodel", "--archive", str(evil),
                 env={"STREAMASR_HOME": str(home)})
    assert_refused(result, "evil.nemo", words)
    assert not (home / "evilmodel").exists()
    assert not marker.exists()


def test_a_pulled_nemo_naming_an_unlisted_class_is_refused_when_used(tmp_path, cli):
    """A pull runs nothing; the classes a pulled .nemo names are held to the list on load."""
    crafted = craft(tmp_path / "patched.nemo",
                    lambda c: c.update(spec_augment={"_target_": HARMLESS_UNLISTED}))
    env = {"STREAMASR_HOME": str(tmp_path / "cache")}
    pulled = cli("models", "pull", "patched", "--archive", str(crafted), env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert_refused(cli("file", str(CLIP), "--model", "patched", env=env),
                   "refusing to load patched.nemo", HARMLESS_UNLISTED, "--trust-model-config")


# ----- what still loads -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny-nemo-streaming", "tiny-nemo-band", "tiny-nemo-noncausal"])
def test_the_bundled_models_pass_the_check_untouched(name):
    path = MODELS / name / f"{name}.nemo"
    with nemo_archive.opened(path) as vetted:
        assert vetted.trusted_targets == ()
        assert (vetted.directory / "model_weights.ckpt").is_file()
        assert vetted.config["tokenizer"]["dir"] == str(vetted.directory)


def test_trust_model_config_lets_a_harmless_unlisted_class_in_with_a_warning(tmp_path, cli):
    section = {"_target_": HARMLESS_UNLISTED, "patch_size": 48, "mask_patches": 2,
               "freq_masks": 0, "freq_width": 0}
    crafted = craft(tmp_path / "patched.nemo", lambda c: c.update(spec_augment=section))
    assert_refused(cli("file", str(CLIP), "--model", str(crafted)), HARMLESS_UNLISTED,
                   "--trust-model-config")
    trusted = cli("file", str(CLIP), "--model", str(crafted), "--trust-model-config")
    assert trusted.returncode == 0, trusted.stderr
    warnings = [line for line in trusted.stderr.splitlines() if HARMLESS_UNLISTED in line]
    assert len(warnings) == 1 and "--trust-model-config" in warnings[0]
    plain = cli("file", str(CLIP), "--model", str(STREAMING))
    assert plain.returncode == 0, plain.stderr
    assert trusted.stdout == plain.stdout  # spec augment acts in training only


def test_a_refused_nemo_never_imports_torch(tmp_path):
    """The archive is checked before torch (seconds to import) and NeMo are."""
    crafted = craft(tmp_path / "patched.nemo",
                    lambda c: c.update(spec_augment={"_target_": HARMLESS_UNLISTED}))
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['streamasr', 'file', {str(CLIP)!r}, '--model', {str(crafted)!r}]\n"
        "try:\n"
        "    runpy.run_module('streamasr.cli', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    print(exit.code, sorted(m for m in ('torch', 'nemo') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert HARMLESS_UNLISTED in done.stderr, done.stderr
    assert done.stdout.split() == ["1", "[]"], done.stdout + done.stderr


def test_the_allowlist_names_real_classes_and_the_attack_is_real(tmp_path, warm_nemo):
    """Every allowed name imports to a class; and without the check, NeMo itself runs the
    function a crafted config names (the marker appears)."""
    marker = tmp_path / "nemo-wrote-this"
    evil = craft(tmp_path / "evil.nemo", lambda c: c.update(preprocessor=function_target(marker)))
    code = (
        "import importlib, inspect, sys\n"
        "from streamasr.backends.nemo.archive import ALLOWED_TARGETS\n"
        "import nemo.collections.asr as asr\n"
        "for name in sorted(ALLOWED_TARGETS):\n"
        "    module, _, attr = name.rpartition('.')\n"
        "    assert inspect.isclass(getattr(importlib.import_module(module), attr)), name\n"
        "print('allowlist ok', flush=True)\n"
        "try:\n"
        f"    asr.models.ASRModel.restore_from({str(evil)!r})\n"
        "except Exception:\n"
        "    pass\n"
    )
    done = warm_nemo.python(code)
    assert "allowlist ok" in done.stdout, done.stderr[-2000:]
    assert marker.exists()


# ----- sherpa-onnx folders ----------------------------------------------------------------


def sherpa_copy(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(MODELS / name, folder)
    return folder


@pytest.mark.parametrize("model, file_name", [
    ("tiny-random-ctc", "tokens.txt"),
    ("tiny-random-bpe", "bpe.vocab"),
    ("tiny-random-ctc", "ctc-epoch-0-avg-1-chunk-16-left-64.onnx"),
])
def test_a_model_file_linked_from_outside_the_folder_is_refused(tmp_path, model, file_name, cli):
    folder = sherpa_copy(tmp_path, model)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.move(folder / file_name, outside / file_name)
    (folder / file_name).symlink_to(outside / file_name)
    assert_refused(cli("file", str(CLIP), "--model", str(folder)),
                   f"{file_name} is a link to a file outside the model folder", "copy the file in")


def test_a_link_that_stays_inside_the_folder_is_fine(tmp_path, cli):
    folder = sherpa_copy(tmp_path, "tiny-random-ctc")
    (folder / "tokens.txt").rename(folder / "vocab-tokens.txt")
    (folder / "tokens.txt").symlink_to("vocab-tokens.txt")
    result = cli("file", str(CLIP), "--model", str(folder))
    assert result.returncode == 0, result.stderr


def with_external_data(tmp_path: Path, location: str) -> Path:
    """A copy of tiny-random-ctc whose ONNX file keeps one tensor in `location`."""
    import onnx
    from onnx import TensorProto

    folder = sherpa_copy(tmp_path, "tiny-random-ctc")
    path = next(folder.glob("*.onnx"))
    model = onnx.load(str(path))
    tensor = TensorProto(name="borrowed", data_type=TensorProto.UINT8, dims=[16])
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    model.graph.initializer.append(tensor)
    path.write_bytes(model.SerializeToString())
    return folder


def test_onnx_external_data_inside_the_folder_is_allowed(tmp_path):
    from streamasr.backends.sherpa import modeldir

    folder = with_external_data(tmp_path, "weights/borrowed.bin")
    assert external_data_locations(next(folder.glob("*.onnx"))) == ("weights/borrowed.bin",)
    assert modeldir.resolve_model(str(folder)).kind == "ctc"  # checked, not refused


@pytest.mark.parametrize("location", ["../../etc/passwd", "/etc/passwd", "sub/../../x"])
def test_onnx_external_data_outside_the_folder_is_refused(tmp_path, location, cli):
    folder = with_external_data(tmp_path, location)
    assert_refused(cli("file", str(CLIP), "--model", str(folder)),
                   f"keeps tensor data in {location!r}, outside the model folder")


def test_trust_model_config_is_refused_for_a_sherpa_model(cli):
    assert_refused(
        cli("file", str(CLIP), "--model", "tiny-random-ctc", "--trust-model-config"),
        "--trust-model-config is for NeMo .nemo files", code=2,
    )
