"""`streamasr file --punctuate`: finals punctuated and cased by sherpa-onnx's online
punctuation model.

Why: all-caps finals without marks are hard to read and make poor captions. The model runs on
committed text only, through sherpa-onnx's own API, so what users get must be exactly what
that API returns for the final's text, in every output (text, JSONL with its words, SRT, VTT),
and a missing or damaged model folder must be one line and exit 1 before anything is
decoded (sherpa-onnx itself ends the process on a malformed vocabulary). The model here is
models/tiny-punct-en: random weights in the release's exact format, so its marks are
meaningless but deterministic.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from test_models_reproducible import assert_same_onnx

from streamasr.output.punctuation import Punctuator
from streamasr.output.render import PunctuationRenderer
from streamasr.session.events import Final, Partial, StreamSummary
from streamasr.text.captions import Word

REPO = Path(__file__).resolve().parent.parent
PUNCT = REPO / "models" / "tiny-punct-en"
CLIPS = REPO / "models" / "tiny-en" / "test_wavs"
CLIP = CLIPS / "4.wav"  # the bundled speech model hears THE RIGHT TIME TO ACT
RELEASE = "sherpa-onnx-online-punct-en-2024-08-06"


def run(*args: str, cwd: Path, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if home is not None:
        env["STREAMASR_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "streamasr", *args], capture_output=True,
                          text=True, timeout=180, cwd=cwd, env=env)


def reference(text: str, folder: Path = PUNCT) -> str:
    """What sherpa-onnx's own API makes of `text` (lower-cased, as the model was trained)."""
    import sherpa_onnx

    config = sherpa_onnx.OnlinePunctuationConfig(
        model_config=sherpa_onnx.OnlinePunctuationModelConfig(
            cnn_bilstm=str(folder / "model.onnx"), bpe_vocab=str(folder / "bpe.vocab")
        )
    )
    return str(sherpa_onnx.OnlinePunctuation(config).add_punctuation_with_case(text.lower()))


def jsonl(done: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_finals_are_what_sherpa_onnx_returns_in_every_output(tmp_path: Path) -> None:
    plain = jsonl(run("file", str(CLIP), "-f", "jsonl", cwd=tmp_path))
    punct = jsonl(run("file", str(CLIP), "-f", "jsonl", "--punctuate", str(PUNCT),
                      cwd=tmp_path))
    (raw,) = [str(r["text"]) for r in plain if r["type"] == "final"]
    assert raw == "THE RIGHT TIME TO ACT"
    expected = reference(raw)
    assert expected != raw and any(c in expected for c in ",.?")
    (final,) = [r for r in punct if r["type"] == "final"]
    assert final["text"] == expected
    words = final["words"]
    assert isinstance(words, list)
    assert [w["text"] for w in words] == expected.split()
    (plain_final,) = [r for r in plain if r["type"] == "final"]
    assert [(w["start_s"], w["end_s"]) for w in words] == [
        (w["start_s"], w["end_s"]) for w in plain_final["words"]  # type: ignore[union-attr]
    ]
    # partials are the recogniser's, untouched
    partials = [r["text"] for r in punct if r["type"] == "partial"]
    assert partials and partials == [r["text"] for r in plain if r["type"] == "partial"]

    text = run("file", str(CLIP), "-f", "text", "--punctuate", str(PUNCT), cwd=tmp_path)
    assert text.returncode == 0 and text.stdout == expected + "\n"
    for fmt in ("srt", "vtt"):
        cues = run("file", str(CLIP), "-f", fmt, "--punctuate", str(PUNCT), cwd=tmp_path)
        assert cues.returncode == 0, cues.stderr
        lines = [line for line in cues.stdout.splitlines()
                 if line and "-->" not in line and not line.isdigit()
                 and line != "WEBVTT" and not line.startswith("NOTE ")]
        assert " ".join(lines) == expected


def test_output_dir_files_are_punctuated_too(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run("file", str(CLIPS / "0.wav"), str(CLIP), "-o", str(out), "-f", "txt,srt",
               "--punctuate", str(PUNCT), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (out / "4.txt").read_text() == reference("THE RIGHT TIME TO ACT") + "\n"
    srt = (out / "4.srt").read_text()
    assert reference("THE RIGHT TIME TO ACT").split()[0] in srt


def test_punctuate_wins_over_sentence_case(tmp_path: Path) -> None:
    both = run("file", str(CLIP), "-f", "text", "--punctuate", str(PUNCT), "--sentence-case",
               cwd=tmp_path)
    assert both.returncode == 0, both.stderr
    assert both.stdout == reference("THE RIGHT TIME TO ACT") + "\n"
    assert "--sentence-case is ignored" in both.stderr


def _truncate_model(folder: Path) -> None:
    data = (folder / "model.onnx").read_bytes()
    (folder / "model.onnx").write_bytes(data[: len(data) // 2])


def _garbage_vocab(folder: Path) -> None:
    (folder / "bpe.vocab").write_text("<unk>\t0\n<s>\t0\n</s>\t0\nthree fields here\n")


def _binary_vocab(folder: Path) -> None:
    (folder / "bpe.vocab").write_bytes(bytes(range(256)) * 4)


def _no_vocab(folder: Path) -> None:
    (folder / "bpe.vocab").unlink()


def _no_model(folder: Path) -> None:
    (folder / "model.onnx").unlink()


def _speech_model(folder: Path) -> None:
    """An ONNX file without the punctuation metadata (a speech model's joiner)."""
    joiner = next((REPO / "models" / "tiny-random-transducer").glob("joiner*.onnx"))
    shutil.copyfile(joiner, folder / "model.onnx")


@pytest.mark.parametrize(
    "damage", [_truncate_model, _garbage_vocab, _binary_vocab, _no_vocab, _no_model,
               _speech_model],
)
def test_a_damaged_model_folder_is_one_line_and_exit_1(
    tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    folder = tmp_path / "punct"
    shutil.copytree(PUNCT, folder)
    damage(folder)
    done = run("file", str(CLIP), "--punctuate", str(folder), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "--punctuate" in done.stderr and done.stdout == ""


def test_missing_folder_unknown_name_and_speech_models(tmp_path: Path) -> None:
    home = tmp_path / "home"
    missing = run("file", str(CLIP), "--punctuate", str(tmp_path / "nowhere"), cwd=tmp_path,
                  home=home)
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1
    assert "streamasr models pull punct-en" in missing.stderr
    not_pulled = run("file", str(CLIP), "--punctuate", "punct-en", cwd=tmp_path, home=home)
    assert not_pulled.returncode == 1
    assert "`streamasr models pull punct-en`" in not_pulled.stderr
    speech = run("file", str(CLIP), "--punctuate", "en", cwd=tmp_path, home=home)
    assert speech.returncode == 2 and "is a speech model" in speech.stderr
    wrong_way = run("file", str(CLIP), "--model", "punct-en", cwd=tmp_path, home=home)
    assert wrong_way.returncode == 2 and "--punctuate punct-en" in wrong_way.stderr


def test_the_release_installs_with_models_pull_and_is_found_by_name(tmp_path: Path) -> None:
    """The release's layout (one top folder: model.onnx, model.int8.onnx, bpe.vocab) built
    from the tiny model; pulled from a local archive, trusted on first use."""
    top = tmp_path / "pack" / RELEASE
    shutil.copytree(PUNCT, top)
    shutil.copyfile(PUNCT / "model.onnx", top / "model.int8.onnx")
    archive = tmp_path / f"{RELEASE}.tar.bz2"
    with tarfile.open(archive, "w:bz2") as tar:
        tar.add(top, arcname=RELEASE)
    home = tmp_path / "home"
    pulled = run("models", "pull", "punct-en", "--archive", str(archive), cwd=tmp_path,
                 home=home)
    assert pulled.returncode == 0, pulled.stderr
    assert (home / RELEASE / "bpe.vocab").is_file()
    listed = json.loads(run("models", "list", "-f", "json", cwd=tmp_path, home=home).stdout)
    (row,) = [m for m in listed["models"] if m["name"] == RELEASE]
    assert row["kind"] == "punctuation" and row["installed"].startswith("yes")
    done = run("file", str(CLIP), "-f", "text", "--punctuate", "punct-en", cwd=tmp_path,
               home=home)
    assert done.returncode == 0, done.stderr
    assert done.stdout == reference("THE RIGHT TIME TO ACT") + "\n"


class _Collect:
    def __init__(self) -> None:
        self.events: list[object] = []

    def begin(self, source: str) -> None:
        pass

    def event(self, event: object) -> None:
        self.events.append(event)

    def end(self, summary: StreamSummary) -> None:
        pass


def test_renderer_replaces_finals_only_and_always_their_words() -> None:
    punctuator = Punctuator(PUNCT)
    inner = _Collect()
    renderer = PunctuationRenderer(inner, punctuator.punctuate)  # type: ignore[arg-type]
    words = (Word("HOW", 0.0, 0.2), Word("ARE", 0.2, 0.4), Word("YOU", 0.4, 0.6))
    partial = Partial(seq=1, audio_s=0.5, wall_s=0.0, segment=0, text="HOW ARE")
    renderer.event(partial)
    renderer.event(Final(seq=2, audio_s=0.6, wall_s=0.0, segment=0,
                         text="HOW ARE YOU", start_s=0.0, end_s=0.6, words=words))
    # words that do not line up with the text still take its words (one truth), sharing the
    # old words' span evenly
    renderer.event(Final(seq=3, audio_s=0.9, wall_s=0.0, segment=1,
                         text="HOW ARE YOU", start_s=0.6, end_s=0.9, words=words[:2]))
    renderer.event(Final(seq=4, audio_s=1.0, wall_s=0.0, segment=2, text="",
                         start_s=0.9, end_s=1.0))
    first, second, third, empty = inner.events
    assert first == partial
    expected = reference("how are you")
    assert isinstance(second, Final) and second.text == expected
    assert [w.text for w in second.words] == expected.split()
    assert [(w.start_s, w.end_s) for w in second.words] == [(w.start_s, w.end_s) for w in words]
    assert isinstance(third, Final) and third.text == expected
    assert [w.text for w in third.words] == expected.split()
    assert (third.words[0].start_s, third.words[-1].end_s) == (0.0, 0.4)
    assert isinstance(empty, Final) and empty.text == ""


def test_the_generator_rebuilds_the_bundled_model(tmp_path: Path) -> None:
    """Same vocabulary bytes; the same ONNX graph and metadata, weights within tolerance (on
    another CPU torch's SIMD paths may move the last bits: tests/test_models_reproducible.py)."""
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "make_punct_model.py"), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "bpe.vocab").read_bytes() == (PUNCT / "bpe.vocab").read_bytes()
    assert_same_onnx(tmp_path / "model.onnx", PUNCT / "model.onnx")
