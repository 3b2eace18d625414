"""The open-vocabulary data scripts and --vocab bpe training, end to end on real engines.

Why: the bundled English model is trained on WordNet sentences spoken by espeak-ng, flite
and festival, tested on voices it never heard, and exported with SentencePiece pieces.
Every promise behind that (exact transcripts, held-out voices and sentences, known speech
span and level, reproducible bytes, a BPE model that the CLI and its hotwords accept) is
checked here on real output of the scripts, run as a user runs them.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from streamasr.text.tokens import read_vocabulary

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))
import make_open_data  # noqa: E402
import sentences  # noqa: E402
import tts  # noqa: E402
import voices  # noqa: E402

TRANSCRIPT = re.compile(r"^[A-Z']+( [A-Z']+)*$")
SR = voices.SAMPLE_RATE
SEED = "5"
BPE_SIZE = 64


@pytest.fixture(autouse=True)
def _tools() -> None:
    """CI installs the synthesisers and sox: their absence fails the tests, never skips them."""
    from conftest import require_tool

    for tool in [*voices.TOOLS.values(), "sox"]:
        require_tool(tool)


def run_py(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """A fresh Python process, as a user runs the scripts and the CLI."""
    result = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


# ----------------------------------------------------------------------------- sentences


def test_everyday_sentences_are_many_plain_and_common() -> None:
    found = sentences.everyday_sentences()
    assert len(found) >= 5000
    assert found == sorted(set(found))
    common = sentences.common_words(5000)
    for text in found:
        assert TRANSCRIPT.match(text), text
        words = text.split()
        assert sentences.MIN_WORDS <= len(words) <= sentences.MAX_WORDS, text
        assert set(words) <= common, text


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("the state has elected a new president", "THE STATE HAS ELECTED A NEW PRESIDENT"),
        ("a well-known fact", "A WELL KNOWN FACT"),
        ("don't go there!", "DON'T GO THERE"),
        ("Stop, please.", "STOP PLEASE"),
        ("he has 3 cats", None),
        ("it cost 20 dollars", None),
        ('he said "no" twice', None),
        ("a car (a red one)", None),
        ("the [old] house", None),
        ("use e.g. a knife", None),
    ],
)
def test_transcript_keeps_exactly_the_spoken_words(sentence: str, expected: str | None) -> None:
    """Hyphens split words, end marks vanish; digits, quotes and brackets reject the sentence."""
    assert sentences.transcript(sentence) == expected


# ----------------------------------------------------------------------------- voices


def test_heldout_voices_never_train_and_are_real() -> None:
    every = set(voices.all_voices())
    assert voices.HELDOUT_DEBIAN <= every
    training = {v for e in voices.TOOLS for v in voices.training_voices(e)}
    heldout = {v for v in every if voices.is_heldout(v)}
    assert heldout >= voices.HELDOUT_DEBIAN
    assert not training & heldout
    assert training | heldout == every
    for engine in voices.TOOLS:
        assert voices.training_voices(engine), engine


def one_voice_per_engine() -> list[str]:
    return [voices.training_voices(engine)[0] for engine in voices.TOOLS]


@pytest.mark.parametrize("voice", one_voice_per_engine())
def test_render_is_reproducible_and_puts_speech_where_it_says(voice: str) -> None:
    style = dataclasses.replace(
        voices.random_style(np.random.default_rng(3)), noise="pink", reverb=30, snr_db=20.0
    )
    first = voices.render(voice, "open the door please", style)
    again = voices.render(voice, "open the door please", style)
    assert np.array_equal(first.samples, again.samples)
    assert first.onset_sample == round(style.lead_s * SR)
    assert first.samples.size - first.end_sample == round(style.trail_s * SR)

    plain = voices.plain_style()
    utt = voices.render(voice, "open the door please", plain)
    onset, end = utt.onset_sample, utt.end_sample
    assert onset == round(plain.lead_s * SR)
    assert utt.samples.size - end == round(plain.trail_s * SR)
    assert not utt.samples[:onset].any() and not utt.samples[end:].any()
    peak = float(np.max(np.abs(utt.samples)))
    assert abs(utt.samples[onset]) > 0 and abs(utt.samples[end - 1]) > 0
    assert 20 * np.log10(peak) == pytest.approx(plain.peak_dbfs, abs=0.1)
    assert end - onset > 0.5 * SR  # four words are real speech, not a click


def low_band_share(noise: np.ndarray) -> float:
    """Share of the power below 1/16 of the band."""
    power = np.abs(np.fft.rfft(noise)) ** 2
    return float(power[: power.size // 16].sum() / power.sum())


def test_coloured_noise_has_unit_rms_and_its_colour() -> None:
    share = {}
    for kind in ("white", "pink", "brown"):
        noise = voices.coloured_noise(kind, 16000, np.random.default_rng(1))
        assert np.sqrt(np.mean(noise**2)) == pytest.approx(1.0, abs=1e-9)
        share[kind] = low_band_share(noise)
    assert share["white"] < 0.1
    assert share["pink"] > 2 * share["white"]
    assert share["brown"] > share["pink"]


# ----------------------------------------------------------------------------- make_open_data


def make_open(out: Path, *args: str) -> Path:
    run_py(str(SCRIPTS / "make_open_data.py"), "--out", str(out), "--seed", SEED, *args)
    return out


@pytest.fixture(scope="module")
def open_sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same tiny set with 2 and 1 workers, and a training set of random word lists."""
    root = tmp_path_factory.mktemp("open")
    tiny = ("--train", "12", "--per-test", "3", "--neural", "2")
    words = ("--train", "12", "--per-test", "0", "--neural", "0", "--random-share", "1")
    return {
        "a": make_open(root / "a", *tiny, "--jobs", "2"),
        "b": make_open(root / "b", *tiny, "--jobs", "1"),
        "random": make_open(root / "random", *words, "--jobs", "1"),
    }


def test_open_data_is_independent_of_jobs(open_sets: dict[str, Path]) -> None:
    a, b = tree_bytes(open_sets["a"]), tree_bytes(open_sets["b"])
    assert a == b
    for split in ("train", *make_open_data.TEST_SETS):
        assert f"{split}/manifest.jsonl" in a
    assert sum(name.endswith(".wav") for name in a) == 12 + 3 * 3


def test_test_sentences_never_train(open_sets: dict[str, Path]) -> None:
    out = open_sets["a"]
    pool, tests, neural = make_open_data.split_sentences(int(SEED), 3, 2)
    held = {t for texts in tests.values() for t in texts} | set(neural)
    assert len(held) == 3 * 3 + 2
    assert not held & set(pool)
    train = read_jsonl(out / "train" / "manifest.jsonl")
    assert {r["text"] for r in train} <= set(pool)
    for name in make_open_data.TEST_SETS:
        assert [r["text"] for r in read_jsonl(out / name / "manifest.jsonl")] == tests[name]
    written = (out / "sentences-neural.txt").read_text(encoding="utf-8").splitlines()
    assert written == neural


def test_voices_of_each_split(open_sets: dict[str, Path]) -> None:
    out = open_sets["a"]
    for row in read_jsonl(out / "train" / "manifest.jsonl"):
        assert row["voice"] in voices.training_voices(row["engine"]), row["voice"]
        assert row["seen_voice"] is True
    debian = read_jsonl(out / "test-heldout-debian" / "manifest.jsonl")
    assert {r["voice"] for r in debian} <= voices.HELDOUT_DEBIAN
    for row in read_jsonl(out / "test-heldout-espeak" / "manifest.jsonl"):
        assert row["engine"] == "espeak" and voices.is_heldout(row["voice"])
    for row in read_jsonl(out / "test-seen" / "manifest.jsonl"):
        assert not voices.is_heldout(row["voice"]) and row["seen_voice"] is True


def test_test_audio_is_spoken_plainly(open_sets: dict[str, Path]) -> None:
    plain = voices.plain_style().__dict__
    for name in make_open_data.TEST_SETS:
        for row in read_jsonl(open_sets["a"] / name / "manifest.jsonl"):
            assert row["style"] == plain
            samples, rate = sf.read(open_sets["a"] / name / row["audio_filepath"], dtype="int16")
            assert rate == SR and samples.size == round(row["duration"] * SR)
            onset, end = round(row["speech_onset_s"] * SR), round(row["speech_end_s"] * SR)
            assert not samples[:onset].any() and not samples[end:].any()  # silence, no noise
            assert np.abs(samples).max() == pytest.approx(32768 * 10 ** (-3 / 20), rel=0.02)


def test_random_share_one_speaks_only_word_lists(open_sets: dict[str, Path]) -> None:
    words = {w.upper() for w in tts.spoken_words()}
    rows = read_jsonl(open_sets["random"] / "train" / "manifest.jsonl")
    assert len(rows) == 12
    for row in rows:
        assert TRANSCRIPT.match(row["text"]) and set(row["text"].split()) <= words, row["text"]
    assert not (open_sets["random"] / "test-seen").exists()


@pytest.mark.parametrize(
    "bad",
    [["--train", "-1"], ["--jobs", "0"], ["--per-test", "many"], ["--random-share", "1.5"]],
)
def test_bad_arguments_are_usage_errors(tmp_path: Path, bad: list[str]) -> None:
    result = run_py(
        str(SCRIPTS / "make_open_data.py"), "--out", str(tmp_path / "out"), *bad, check=False
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- neural_tts


def test_neural_voice_is_deterministic_and_described(tmp_path: Path) -> None:
    lines = ["Open the door please", "the state has elected a new president"]
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    for run in ("one", "two"):
        run_py(str(SCRIPTS / "neural_tts.py"), "--list", str(listing), "--out", str(tmp_path / run))
    assert tree_bytes(tmp_path / "one") == tree_bytes(tmp_path / "two")
    rows = read_jsonl(tmp_path / "one" / "manifest.jsonl")
    assert [r["text"] for r in rows] == [line.upper() for line in lines]
    for row in rows:
        info = sf.info(str(tmp_path / "one" / row["audio_filepath"]))
        assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
        assert row["duration"] == pytest.approx(info.frames / 16000, abs=1e-6)
        assert 0.5 <= row["duration"] <= 5.0
        samples, _ = sf.read(str(tmp_path / "one" / row["audio_filepath"]), dtype="float32")
        assert np.sqrt(np.mean(samples**2)) > 0.01  # speech, not silence


# ----------------------------------------------------------------------------- BPE training


def train_bpe(exp: Path, data: list[Path], *extra: str) -> dict:
    """One training step (--max-minutes 0 stops after the first); returns the checkpoint."""
    import torch

    run_py(
        str(SCRIPTS / "train_tiny_model.py"), "train", "--vocab", "bpe",
        "--bpe-size", str(BPE_SIZE), "--data", *map(str, data), "--exp-dir", str(exp),
        "--max-minutes", "0", "--threads", "1", *extra,
    )  # fmt: skip
    return torch.load(exp / "checkpoint.pt", weights_only=False)


@pytest.fixture(scope="module")
def bpe_model(open_sets: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Train on two folders, resume, export: only the wiring, the weights are meaningless."""
    root = tmp_path_factory.mktemp("bpe")
    data = [open_sets["a"], open_sets["random"]]
    first = train_bpe(root / "exp", data)
    resumed = train_bpe(root / "exp", data, "--resume")
    run_py(
        str(SCRIPTS / "train_tiny_model.py"), "export", "--exp-dir", str(root / "exp"),
        "--out", str(root / "model"),
    )  # fmt: skip
    texts = [r["text"] for d in data for r in read_jsonl(d / "train" / "manifest.jsonl")]
    return {"first": first, "resumed": resumed, "dir": root / "model", "texts": texts}


def test_bpe_training_resumes_with_the_same_vocabulary(bpe_model: dict) -> None:
    first, resumed = bpe_model["first"], bpe_model["resumed"]
    assert len(first["tokens"]) == BPE_SIZE and first["tokens"][0] == "<blk>"
    assert first["bpe_model"]
    assert resumed["state"]["step"] > first["state"]["step"] >= 1
    assert resumed["tokens"] == first["tokens"]
    assert resumed["bpe_model"] == first["bpe_model"]
    assert first["args"]["data"] == resumed["args"]["data"] and len(first["args"]["data"]) == 2


def test_bpe_export_writes_tokens_pieces_and_int8_models(bpe_model: dict) -> None:
    model, tokens = bpe_model["dir"], bpe_model["resumed"]["tokens"]
    lines = (model / "tokens.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "<blk> 0" and len(lines) == BPE_SIZE
    assert lines == [f"{tok} {i}" for i, tok in enumerate(tokens)]
    assert (model / "bpe.model").read_bytes() == bpe_model["resumed"]["bpe_model"]
    vocab = [line.split("\t") for line in (model / "bpe.vocab").read_text("utf-8").splitlines()]
    assert len(vocab) == BPE_SIZE and all(len(parts) == 2 for parts in vocab)
    assert [piece for piece, _ in vocab] == tokens
    assert all(float(score) <= 0 for _, score in vocab)
    for chunk in (16, 32):
        stem = f"epoch-99-avg-1-chunk-{chunk}-left-64"
        for part in ("encoder", "joiner"):
            assert (model / f"{part}-{stem}.int8.onnx").is_file(), (part, chunk)
        assert (model / f"decoder-{stem}.onnx").is_file(), chunk
        assert not (model / f"encoder-{stem}.onnx").exists()
    assert read_vocabulary(model / "tokens.txt").token_type == "bpe"


def hotword_of_pieces(model: Path, texts: list[str]) -> str:
    """A training word that the exported bpe.model spells with its own pieces (no <unk>)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model / "bpe.model"))
    word = max((w for t in texts for w in t.split()), key=len)
    pieces = sp.encode(word, out_type=str)
    assert "".join(pieces) == "▁" + word and "<unk>" not in pieces, pieces
    assert len(pieces) > 1  # a 64-piece model spells a long word from several pieces
    return word


def test_cli_recognises_and_takes_hotwords_with_the_bpe_model(
    bpe_model: dict, open_sets: dict[str, Path], tmp_path: Path
) -> None:
    model = bpe_model["dir"]
    wav = open_sets["a"] / "test-seen" / "wavs" / "000000.wav"
    cli = ["-m", "streamasr.cli", "file", "--model", str(model), str(wav), "--format", "text"]
    plain = run_py(*cli)
    assert "Traceback" not in plain.stderr
    hotwords = tmp_path / "hotwords.txt"
    hotwords.write_text(hotword_of_pieces(model, bpe_model["texts"]) + "\n", encoding="utf-8")
    boosted = run_py(*cli, "--decoding-method", "modified_beam_search", "--hotwords", str(hotwords))
    assert "Failed to encode" not in boosted.stderr
    assert "cannot be written" not in boosted.stderr
