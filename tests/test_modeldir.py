"""Choosing the export for a chunk, and refusing what a model directory cannot do."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from streamasr.backends.sherpa.modeldir import resolve_model
from streamasr.backends.sherpa.onnx_meta import read_encoder_metadata
from streamasr.errors import ModelError


def test_default_chunk_is_16_and_metadata_is_read(random_transducer: Path) -> None:
    files = resolve_model(str(random_transducer))
    assert files.kind == "transducer"
    assert files.chunk == 16 and files.chunk_s == pytest.approx(0.32)
    assert "chunk-16-left-64" in files.encoder.name
    assert "chunk-16-left-64" in files.decoder.name and "chunk-16-left-64" in files.joiner.name
    meta = files.metadata
    assert (meta.model_type, meta.decode_chunk_len, meta.T) == ("zipformer2", 32, 45)
    assert meta.lookahead_frames == 13  # 7 for the subsampling convs + 2*3 for ConvNeXt
    assert meta.left_context_len == (64, 32, 16, 8, 16, 32)


def test_chunk_32_selects_the_other_export(random_transducer: Path) -> None:
    files = resolve_model(str(random_transducer), chunk=32)
    assert "chunk-32-left-64" in files.encoder.name and "chunk-32" in files.joiner.name
    assert (files.metadata.decode_chunk_len, files.metadata.T) == (64, 77)
    assert files.metadata.lookahead_frames == 13


def test_unsupported_chunk_is_refused_with_the_available_ones(random_transducer: Path) -> None:
    with pytest.raises(ModelError, match=r"no export for --chunk 64; it has chunk 16, 32"):
        resolve_model(str(random_transducer), chunk=64)


def test_ctc_model_is_recognised(random_ctc: Path) -> None:
    files = resolve_model(str(random_ctc))
    assert files.kind == "ctc" and files.decoder is None and files.chunk == 16
    with pytest.raises(ModelError, match="it has chunk 16"):
        resolve_model(str(random_ctc), chunk=32)


def test_bundled_name_resolves(random_transducer: Path) -> None:
    assert resolve_model("tiny-random-transducer").directory == random_transducer


def test_unknown_name_suggests_the_closest_bundled_or_released_models() -> None:
    with pytest.raises(ModelError, match=r"unknown model 'nope'.*`streamasr models list`"):
        resolve_model("nope")
    with pytest.raises(ModelError, match=r"did you mean tiny-random-transducer"):
        resolve_model("tiny-random-transduce")


def test_missing_tokens_and_missing_joiner(random_transducer: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(random_transducer, broken)
    for joiner in broken.glob("joiner*"):
        joiner.unlink()
    with pytest.raises(ModelError, match="no joiner ONNX file"):
        resolve_model(str(broken))
    (broken / "tokens.txt").unlink()
    with pytest.raises(ModelError, match="has no tokens.txt"):
        resolve_model(str(broken))


def test_int8_files_are_preferred_unless_fp32(random_transducer: Path, tmp_path: Path) -> None:
    model = tmp_path / "m"
    shutil.copytree(random_transducer, model)
    for path in list(model.glob("*chunk-16*.onnx")):
        shutil.copy(path, path.with_name(path.name.replace(".onnx", ".int8.onnx")))
    assert ".int8." in resolve_model(str(model)).encoder.name
    assert ".int8." not in resolve_model(str(model), prefer_int8=False).encoder.name
    # precision is chosen per export: chunk 32 has only fp32 files here, and still works
    assert ".int8." not in resolve_model(str(model), chunk=32).encoder.name


def test_not_an_encoder_is_a_model_error(tmp_path: Path) -> None:
    bad = tmp_path / "encoder.onnx"
    bad.write_bytes(b"not onnx at all")
    with pytest.raises(ModelError, match="not a readable ONNX file"):
        read_encoder_metadata(bad)


def test_longest_left_context_wins_among_same_chunk_exports(
    random_transducer: Path, tmp_path: Path
) -> None:
    """Released models ship chunk 16 with left 64 and left 128; the longer history is used."""
    import onnx

    model = tmp_path / "m"
    shutil.copytree(random_transducer, model)
    for role in ("encoder", "decoder", "joiner"):
        source = next(model.glob(f"{role}-*chunk-16-left-64.onnx"))
        proto = onnx.load(str(source))
        for prop in proto.metadata_props:
            if prop.key == "left_context_len":
                prop.value = "128,64,32,16,32,64"
        onnx.save(proto, str(source).replace("left-64", "left-128"))
    files = resolve_model(str(model), chunk=16)
    assert files.metadata.left_context == 128
    assert "left-128" in files.encoder.name and "left-128" in files.joiner.name


def test_released_name_not_yet_pulled_says_how_to_pull(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("STREAMASR_HOME", str(tmp_path))
    with pytest.raises(ModelError, match=r"not downloaded yet; run `streamasr models pull en`"):
        resolve_model("en")


# --- tokens.txt checked against the model before the engine loads it -------------------------

_BROKEN_TOKENS = {
    "short": "<blk> 0\n\u2581 1\nA 2\n",
    "empty": "",
    "binary": b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00\x00garbage\x80\x81",
    "not-symbol-id": "<blk> 0\nthis line has no id\n",
}


@pytest.mark.parametrize("damage", sorted(_BROKEN_TOKENS))
@pytest.mark.parametrize("model_name", ["tiny-random-transducer", "tiny-random-ctc"])
def test_broken_tokens_txt_is_one_clear_line_in_a_fresh_process(
    model_name: str, damage: str, tmp_path: Path
) -> None:
    import subprocess
    import sys

    source = Path(__file__).resolve().parent.parent / "models" / model_name
    model = tmp_path / "m"
    shutil.copytree(source, model)
    content = _BROKEN_TOKENS[damage]
    if isinstance(content, bytes):
        (model / "tokens.txt").write_bytes(content)
    else:
        (model / "tokens.txt").write_text(content, encoding="utf-8")
    wav = Path(__file__).resolve().parent.parent / "models" / "tiny-en" / "test_wavs" / "0.wav"
    proc = subprocess.run(
        [sys.executable, "-m", "streamasr.cli", "file", str(wav), "--model", str(model)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # nothing from the engine, no traceback
    assert "tokens.txt" in lines[0] and "came with this model" in lines[0]
    expected = {
        "short": "lists 3 tokens but ", "empty": "is empty", "binary": "is not UTF-8",
        "not-symbol-id": ":2: expected '<symbol> <id>'",
    }[damage]
    assert expected in lines[0]
    if damage == "short":
        assert "scores 29" in lines[0]
    assert proc.stdout == ""


def test_vocab_size_is_read_from_the_model(random_transducer: Path, random_ctc: Path) -> None:
    from streamasr.backends.sherpa.modeldir import check_tokens, model_vocab_size

    tiny_en = Path(__file__).resolve().parent.parent / "models" / "tiny-en"
    # the trained export's joiner has one output per line of its tokens.txt, whatever its size
    tiny_en_tokens = len((tiny_en / "tokens.txt").read_text(encoding="utf-8").splitlines())
    for directory, vocab in ((random_transducer, 29), (random_ctc, 29), (tiny_en, tiny_en_tokens)):
        files = resolve_model(str(directory))
        size, source = model_vocab_size(files)
        assert size == vocab, directory
        assert source in (files.joiner, files.encoder)
        assert check_tokens(files) >= vocab


def test_tokens_longer_than_the_vocabulary_are_accepted(
    random_transducer: Path, tmp_path: Path
) -> None:
    model = tmp_path / "m"
    shutil.copytree(random_transducer, model)
    with (model / "tokens.txt").open("a", encoding="utf-8") as f:
        f.write("<extra> 29\n")
    assert resolve_model(str(model)).tokens == model / "tokens.txt"
