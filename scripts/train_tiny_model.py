#!/usr/bin/env python3
"""Train a small streaming Zipformer2 transducer on synthetic speech, then export it.

Why: the project needs a bundled model that really recognises (some) English, so the
quick start and the benchmarks show real text; released models cannot be downloaded
here. This is a test/demo model trained in a few hours on two CPU cores on
espeak-ng speech from ``scripts/make_training_data.py``; for real speech use a
released model such as sherpa-onnx-streaming-zipformer-en-2023-06-26.

What it does:

* features: 80-bin fbank exactly as sherpa-onnx computes them (``zf_features``),
  computed once per split into ``<exp-dir>/feats-<split>.pt``;
* model: the PyPI ``zipformer`` package's causal Zipformer2 with its stateless
  decoder + joiner (and an auxiliary CTC head, not exported), trained with
  dynamic chunks of 16 or 32 frames (50 Hz) and 64 frames of left context, the
  settings it is exported for;
* loss: exact RNN-T loss in plain PyTorch (``zf_rnnt_loss``) + 0.3 x CTC;
* optimiser: the package's ScaledAdam + Eden schedule;
* checkpoints every ``--save-every-min`` minutes to ``<exp-dir>/checkpoint.pt``
  (``--resume`` continues from there), loss curve in ``<exp-dir>/loss.csv``, log in
  ``<exp-dir>/train.log``; stops after ``--max-minutes`` of training time.

Usage::

    python scripts/make_training_data.py --out build/tts --train 6000 --test 200 --seed 0
    nohup python scripts/train_tiny_model.py train --data build/tts --exp-dir build/train \\
        --max-minutes 70 > build/train/nohup.out 2>&1 &
    python scripts/train_tiny_model.py train ... --resume        # after an interruption
    python scripts/train_tiny_model.py export --exp-dir build/train --out models/tiny-en

``--vocab words`` trains on one token per word of the (closed) training vocabulary
instead of characters, and ``--init-from CKPT`` starts from another run's weights where
shapes match; ``--resume`` with another ``--data`` continues a run on new data, and
``export --keep-words-of MANIFEST`` drops words that data no longer has.
models/tiny-en/README.md records the exact runs behind the bundled model.
``export --head ctc`` exports the auxiliary CTC head as a streaming zipformer2 CTC model.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import logging
import math
import random
import sys
import time
from pathlib import Path

import soundfile as sf
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zf_compat  # noqa: E402

zf_compat.install()

from make_test_models import TOKENS, WORD_BOUNDARY, model_params, write_tokens  # noqa: E402
from zf_features import compute_fbank  # noqa: E402
from zf_rnnt_loss import rnnt_loss  # noqa: E402
from zipformer.bin.train import get_model, set_batch_count  # noqa: E402
from zipformer.modules.optim import Eden, ScaledAdam  # noqa: E402
from zipformer.utils import get_parameter_groups_with_lrs  # noqa: E402

log = logging.getLogger("train_tiny_model")

# ~2 M parameters: 6 stacks at 25..100 Hz, small enough for ~1 h on 2 CPU cores.
ARCH: dict[str, str | int] = {
    "num_encoder_layers": "1,1,1,2,1,1",
    "downsampling_factor": "1,2,4,8,4,2",
    "feedforward_dim": "128,192,256,384,256,192",
    "num_heads": "4,4,4,4,4,4",
    "encoder_dim": "48,64,96,128,96,64",
    "encoder_unmasked_dim": "48,48,64,64,64,48",
    "query_head_dim": "16",
    "value_head_dim": "12",
    "pos_head_dim": "4",
    "pos_dim": 32,
    "cnn_module_kernel": "31,31,15,15,15,31",
    "decoder_dim": 128,
    "joiner_dim": 128,
    "context_size": 2,
}
TRAIN_CHUNKS = "16,32"
LEFT_CONTEXT = 64
EXPORT_CHUNKS = (16, 32)
CTC_SCALE = 0.3
SPEC_AUG = True
# The vocabulary in use: TOKENS (characters, as the random test models) or whole
# words ("▁WORD", see word_vocab). set_vocab() switches it.
VOCAB: list[str] = list(TOKENS)
VOCAB_ID: dict[str, int] = {tok: i for i, tok in enumerate(VOCAB)}
# With --vocab bpe: the SentencePiece model (its serialized bytes travel in checkpoints).
BPE: dict[str, object] = {}
BPE_USER_SYMBOLS = ["<blk>", "<sos/eos>"]  # ids 0 and 1, then <unk> = 2, as icefall's


def set_vocab(tokens: list[str], bpe_model: bytes | None = None) -> None:
    global VOCAB, VOCAB_ID
    VOCAB = list(tokens)
    VOCAB_ID = {tok: i for i, tok in enumerate(VOCAB)}
    BPE.clear()
    if bpe_model is not None:
        import sentencepiece as spm

        BPE["model"] = bpe_model
        BPE["sp"] = spm.SentencePieceProcessor(model_proto=bpe_model)


def train_bpe(texts: list[str], size: int) -> tuple[list[str], bytes]:
    """A unigram SentencePiece model of `size` pieces over the training transcripts.

    Why pieces: an open vocabulary (any word can be spelled) with far fewer output steps
    than characters. <blk> is id 0 as the transducer needs; <unk> never occurs in A-Z text.
    """
    import io

    import sentencepiece as spm

    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=proto,
        vocab_size=size,
        model_type="unigram",
        character_coverage=1.0,
        normalization_rule_name="identity",
        user_defined_symbols=BPE_USER_SYMBOLS,
        unk_id=len(BPE_USER_SYMBOLS),
        bos_id=-1,
        eos_id=-1,
        input_sentence_size=1_000_000,
        num_threads=1,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())], proto.getvalue()


def is_bpe_vocab() -> bool:
    return "sp" in BPE


def word_vocab(texts: list[str]) -> list[str]:
    """<blk> plus one token per distinct training word, written '▁WORD'.

    sherpa-onnx turns the leading '▁' into a space and strips the first one, so the
    token sequence '▁HELLO ▁WORLD' reads 'HELLO WORLD'.
    """
    words = sorted({w for t in texts for w in t.split()})
    return ["<blk>"] + [WORD_BOUNDARY + w for w in words]


def is_word_vocab(tokens: list[str]) -> bool:
    return len(tokens) > 1 and tokens[1].startswith(WORD_BOUNDARY) and len(tokens[1]) > 1


# ----------------------------------------------------------------------------- data


def text_to_ids(text: str) -> list[int] | None:
    """Upper-case words -> token ids of the vocabulary in use; None if something is unknown.

    Characters: letters with U+2581 between words. Words: one '▁WORD' token per word.
    """
    ids: list[int] = []
    if is_bpe_vocab():
        ids = BPE["sp"].encode(text, out_type=int)  # type: ignore[attr-defined]
        return None if (not ids or 2 in ids) else ids
    if is_word_vocab(VOCAB):
        for word in text.split():
            if WORD_BOUNDARY + word not in VOCAB_ID:
                return None
            ids.append(VOCAB_ID[WORD_BOUNDARY + word])
        return ids
    for w, word in enumerate(text.split()):
        if w:
            ids.append(VOCAB_ID[WORD_BOUNDARY])
        for ch in word:
            if ch not in VOCAB_ID:
                return None
            ids.append(VOCAB_ID[ch])
    return ids


def relabel(data: dict) -> dict:
    """Recompute labels for the vocabulary in use (the feature cache is vocabulary-free)."""
    labels = [text_to_ids(t) for t in data["texts"]]
    missing = sum(ids is None for ids in labels)
    if missing:
        raise ValueError(f"{missing} transcripts have tokens outside the vocabulary")
    data["labels"] = labels
    return data


def load_split(manifest: Path, cache: Path) -> dict:
    """Features + labels of one manifest, cached (recomputed if the manifest changes)."""
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()
    if cache.exists():
        data = torch.load(cache, weights_only=False)
        if data.get("manifest_sha256") == digest:
            return data
    rows = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    feats, lengths, labels, texts, voices, speech = [], [], [], [], [], []
    t0 = time.monotonic()
    for i, row in enumerate(rows):
        ids = text_to_ids(row["text"])
        if ids is None:
            log.warning(
                "skipping %s: text has characters outside tokens.txt", row["audio_filepath"]
            )
            continue
        samples, rate = sf.read(manifest.parent / row["audio_filepath"], dtype="float32")
        if samples.ndim > 1:
            samples = samples.mean(axis=1)
        f = compute_fbank(samples, rate)
        feats.append(torch.from_numpy(f).to(torch.float16))
        lengths.append(f.shape[0])
        labels.append(ids)
        texts.append(row["text"])
        voices.append(row.get("voice", ""))
        onset = int(row.get("speech_onset_s", 0.0) * 100)
        end = int(math.ceil(row.get("speech_end_s", f.shape[0] / 100) * 100))
        speech.append((max(0, onset), min(f.shape[0], end)))
        if (i + 1) % 1000 == 0:
            log.info("features: %d/%d (%.0f s)", i + 1, len(rows), time.monotonic() - t0)
    data = {
        "manifest_sha256": digest,
        "feats": feats,
        "lengths": lengths,
        "labels": labels,
        "texts": texts,
        "voices": voices,
        "speech": speech,
    }
    cache.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, cache)
    return data


def load_training_data(dirs: list[Path], exp: Path) -> dict:
    """The train splits of one or more data folders, features cached per folder, in order."""
    parts = [
        load_split(
            d / "train" / "manifest.jsonl",
            exp / ("feats-train.pt" if k == 0 else f"feats-train-{k}.pt"),
        )
        for k, d in enumerate(dirs)
    ]
    if len(parts) == 1:
        return parts[0]
    merged = {key: [v for part in parts for v in part[key]] for key in LIST_FIELDS}
    merged["manifest_sha256"] = "+".join(part["manifest_sha256"] for part in parts)
    return merged


LIST_FIELDS = ("feats", "lengths", "labels", "texts", "voices", "speech")


def make_batches(lengths: list[int], indices: list[int], max_frames: int, seed: int) -> list:
    """Length-sorted batches of at most max_frames padded frames, in shuffled order."""
    order = sorted(indices, key=lambda i: lengths[i])
    batches, cur = [], []
    for i in order:
        if cur and (len(cur) + 1) * lengths[i] > max_frames:
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    random.Random(seed).shuffle(batches)
    return batches


def trim(data: dict, i: int, rng: random.Random | None) -> torch.Tensor:
    """Cut the known leading/trailing silence down to a random 0.05-0.4 s margin.

    The synthetic utterances carry 0.2-1.0 s of silence at each end, about a third
    of the audio; cutting most of it saves that much compute. Some silence stays so
    that the model still sees utterance starts and ends.
    """
    f = data["feats"][i]
    if rng is None:
        return f.float()
    onset, end = data["speech"][i]
    lead, trail = rng.randint(5, 40), rng.randint(5, 40)
    return f[max(0, onset - lead) : min(f.shape[0], end + trail)].float()


def train_length(data: dict, i: int) -> int:
    onset, end = data["speech"][i]
    return min(data["lengths"][i], end - onset + 80)


def collate(data: dict, batch: list[int], augment: random.Random | None) -> tuple:
    feats = [trim(data, i, augment) for i in batch]
    x_lens = torch.tensor([f.shape[0] for f in feats])
    x = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True, padding_value=-23.0259)
    if augment is not None and SPEC_AUG:
        spec_augment(x, x_lens, augment)
    labels = [data["labels"][i] for i in batch]
    y_lens = torch.tensor([len(y) for y in labels])
    y = torch.zeros(len(batch), int(y_lens.max()), dtype=torch.int64)
    for k, ids in enumerate(labels):
        y[k, : len(ids)] = torch.tensor(ids)
    return x, x_lens, y, y_lens


def spec_augment(x: torch.Tensor, x_lens: torch.Tensor, rng: random.Random) -> None:
    """Mild in-place masking: 2 frequency bands of <= 10 bins, time masks of <= 20 frames."""
    n, _, dim = x.shape
    for k in range(n):
        mean = float(x[k, : x_lens[k]].mean())
        for _ in range(2):
            w = rng.randint(0, 10)
            f0 = rng.randint(0, dim - w)
            x[k, :, f0 : f0 + w] = mean
        for _ in range(max(1, int(x_lens[k]) // 300)):
            w = rng.randint(0, 20)
            t0 = rng.randint(0, max(0, int(x_lens[k]) - w))
            x[k, t0 : t0 + w, :] = mean


# ----------------------------------------------------------------------------- model


def tiny_params(use_ctc: bool, chunk: int):
    """The package's parameters for ARCH, left context 64 and the vocabulary in use."""
    return model_params(
        use_transducer=True,
        use_ctc=use_ctc,
        chunk=chunk,
        left=LEFT_CONTEXT,
        arch=ARCH,
        vocab_size=len(VOCAB),
    )


def build_model(chunks: str = TRAIN_CHUNKS) -> torch.nn.Module:
    params = tiny_params(use_ctc=True, chunk=0)
    params.chunk_size = chunks
    return get_model(params)


def compute_loss(model: torch.nn.Module, x, x_lens, y, y_lens) -> tuple[torch.Tensor, dict]:
    """Transducer loss (sum over utterances) + CTC_SCALE x CTC loss; stats per frame."""
    enc, enc_lens = model.forward_encoder(x, x_lens)
    blank = model.decoder.blank_id
    sos_y = F.pad(y, (1, 0), value=blank)
    dec = model.decoder(sos_y)  # (N, U+1, D)
    joiner = model.joiner
    logits = joiner(
        joiner.encoder_proj(enc).unsqueeze(2),
        joiner.decoder_proj(dec).unsqueeze(1),
        project_input=False,
    )  # (N, T, U+1, V)
    loss_rnnt = rnnt_loss(logits, y, enc_lens, y_lens, blank=blank, reduction="sum")
    targets = torch.cat([y[k, : y_lens[k]] for k in range(y.shape[0])])
    ctc_lp = model.ctc_output(enc)
    loss_ctc = F.ctc_loss(
        ctc_lp.permute(1, 0, 2),
        targets,
        enc_lens,
        y_lens,
        blank=blank,
        reduction="sum",
        zero_infinity=True,
    )
    frames = float(enc_lens.sum())
    loss = loss_rnnt + CTC_SCALE * loss_ctc
    return loss, {
        "rnnt": loss_rnnt.item() / frames,
        "ctc": loss_ctc.item() / frames,
        "frames": frames,
    }


@torch.no_grad()
def greedy_decode(model: torch.nn.Module, x, x_lens, max_sym_per_frame: int = 3) -> list[list[int]]:
    """Greedy transducer search in PyTorch (for validation WER during training)."""
    enc, enc_lens = model.forward_encoder(x, x_lens)
    joiner, decoder = model.joiner, model.decoder
    enc_p = joiner.encoder_proj(enc)
    blank, ctx = decoder.blank_id, decoder.context_size
    hyps = []
    for k in range(enc.shape[0]):
        hyp = [blank] * ctx
        dec_out = joiner.decoder_proj(decoder(torch.tensor([hyp[-ctx:]]), need_pad=False))
        for t in range(int(enc_lens[k])):
            for _ in range(max_sym_per_frame):
                logit = joiner(enc_p[k, t][None, None], dec_out, project_input=False)
                tok = int(logit.argmax(-1))
                if tok == blank:
                    break
                hyp.append(tok)
                dec_out = joiner.decoder_proj(decoder(torch.tensor([hyp[-ctx:]]), need_pad=False))
        hyps.append(hyp[ctx:])
    return hyps


def ids_to_text(ids: list[int]) -> str:
    return "".join(VOCAB[i] for i in ids).replace(WORD_BOUNDARY, " ").strip()


def word_errors(ref: str, hyp: str) -> int:
    """Word edit distance (substitutions + deletions + insertions, from jiwer) of raw texts.

    Raw on purpose, not through streamasr.bench.metrics: the dev WER in loss.csv compares
    the model's tokens with the training transcript as they are, so a stray apostrophe from
    a character model counts as a word; bench's normalisation would drop it.
    """
    import jiwer

    result = jiwer.process_words(ref, hyp)
    return result.substitutions + result.deletions + result.insertions


def validate(model: torch.nn.Module, data: dict, idx: list[int], decode_n: int) -> dict:
    """Per-frame loss on the dev utterances and greedy WER on the first decode_n."""
    was_training = model.training
    model.eval()
    tot_rnnt = tot_ctc = frames = 0.0
    with torch.no_grad():
        for batch in make_batches(data["lengths"], idx, 6000, 0):
            x, x_lens, y, y_lens = collate(data, batch, None)
            _, st = compute_loss(model, x, x_lens, y, y_lens)
            tot_rnnt += st["rnnt"] * st["frames"]
            tot_ctc += st["ctc"] * st["frames"]
            frames += st["frames"]
        errs = words = 0
        for i in idx[:decode_n]:
            x, x_lens, _, _ = collate(data, [i], None)
            hyp = ids_to_text(greedy_decode(model, x, x_lens)[0])
            errs += word_errors(data["texts"][i], hyp)
            words += len(data["texts"][i].split())
    model.train(was_training)
    return {"rnnt": tot_rnnt / frames, "ctc": tot_ctc / frames, "wer": errs / max(words, 1)}


# ----------------------------------------------------------------------------- training


def train(args: argparse.Namespace) -> None:
    global SPEC_AUG
    SPEC_AUG = bool(args.spec_aug)
    torch.set_num_threads(args.threads)
    exp = args.exp_dir
    exp.mkdir(parents=True, exist_ok=True)
    data = load_training_data(args.data, exp)
    n_utts = len(data["lengths"])
    dev_idx = [i for i in range(n_utts) if i % args.dev_every == 0]
    train_idx = [i for i in range(n_utts) if i % args.dev_every != 0]
    hours = sum(data["lengths"][i] for i in train_idx) / 100 / 3600
    log.info("train: %d utts (%.2f h), dev: %d utts", len(train_idx), hours, len(dev_idx))

    ckpt_path = exp / "checkpoint.pt"
    if args.resume and ckpt_path.exists():
        ckpt = torch.load(ckpt_path, weights_only=False)
        set_vocab(ckpt["tokens"], ckpt.get("bpe_model"))
    elif args.vocab == "words":
        set_vocab(word_vocab(data["texts"]))
    elif args.vocab == "bpe":
        set_vocab(*train_bpe(data["texts"], args.bpe_size))
    relabel(data)
    log.info("vocabulary: %s, %d tokens", args.vocab, len(VOCAB))

    zf_compat.fix_random_seed(args.seed)
    model = build_model()
    if args.init_from is not None and not (args.resume and ckpt_path.exists()):
        init = torch.load(args.init_from, weights_only=False)["model"]
        own = model.state_dict()
        taken = {k: v for k, v in init.items() if k in own and own[k].shape == v.shape}
        model.load_state_dict(taken, strict=False)
        log.info("initialised %d of %d tensors from %s", len(taken), len(own), args.init_from)
    n_params = sum(p.numel() for p in model.parameters())
    n_export = n_params - sum(p.numel() for p in model.ctc_output.parameters())
    n_export -= model.simple_am_proj.weight.numel() + model.simple_lm_proj.weight.numel()
    log.info("parameters: %d (exported transducer: ~%d)", n_params, n_export)
    optimizer = ScaledAdam(
        get_parameter_groups_with_lrs(model, lr=args.base_lr, include_names=True),
        lr=args.base_lr,
        clipping_scale=2.0,
    )
    scheduler = Eden(
        optimizer, args.lr_batches, args.lr_hours, warmup_batches=args.warmup, warmup_start=0.1
    )
    ema = {k: v.detach().clone().double() for k, v in model.state_dict().items()}

    state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "train_s": 0.0, "hours_seen": 0.0}
    if args.resume and ckpt_path.exists():
        ckpt = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        ema = ckpt["ema"]
        state = ckpt["state"]
        random.setstate(ckpt["py_rng"])
        torch.set_rng_state(ckpt["torch_rng"])
        log.info("resumed from %s at step %d (epoch %d)", ckpt_path, state["step"], state["epoch"])
    elif not args.resume:
        for f in ("loss.csv",):
            (exp / f).unlink(missing_ok=True)

    def save(path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "ema": ema,
                "state": state,
                "py_rng": random.getstate(),
                "torch_rng": torch.get_rng_state(),
                "arch": ARCH,
                "tokens": VOCAB,
                "bpe_model": BPE.get("model"),
                "args": vars(args),
            },
            tmp,
        )
        tmp.replace(path)

    csv_path = exp / "loss.csv"
    new_csv = not csv_path.exists()
    csv_file = csv_path.open("a", newline="")
    writer = csv.writer(csv_file)
    if new_csv:
        writer.writerow(
            ["step", "epoch", "train_min", "hours_seen", "lr", "train_rnnt", "train_ctc",
             "dev_rnnt", "dev_ctc", "dev_wer"]
        )  # fmt: skip

    model.train()
    aug_rng = random.Random(args.seed + 7)
    run_start = time.monotonic()
    base_train_s = state["train_s"]
    last_save = time.monotonic()
    avg = {"rnnt": 0.0, "ctc": 0.0, "n": 0}
    budget_s = args.max_minutes * 60
    done = False
    while not done and state["epoch"] < args.max_epochs:
        lengths = [train_length(data, i) for i in range(n_utts)]
        batches = make_batches(lengths, train_idx, args.max_frames, args.seed + state["epoch"])
        for b in range(state["batch_in_epoch"], len(batches)):
            x, x_lens, y, y_lens = collate(data, batches[b], aug_rng)
            set_batch_count(model, state["step"] * args.batch_count_scale)
            loss, st = compute_loss(model, x, x_lens, y, y_lens)
            loss.backward()
            scheduler.step_batch(state["step"])
            scheduler.step_epoch(state["hours_seen"])
            optimizer.step()
            optimizer.zero_grad()
            if not math.isfinite(st["rnnt"]):
                raise RuntimeError(f"non-finite loss at step {state['step']}")

            state["step"] += 1
            state["batch_in_epoch"] = b + 1
            state["hours_seen"] += float(x_lens.sum()) / 100 / 3600
            state["train_s"] = base_train_s + time.monotonic() - run_start
            decay = min(args.ema_decay, (1 + state["step"]) / (10 + state["step"]))
            with torch.no_grad():
                for k, v in model.state_dict().items():
                    if v.dtype.is_floating_point:
                        ema[k].mul_(decay).add_(v.double(), alpha=1 - decay)
                    else:
                        ema[k].copy_(v)
            avg["rnnt"] += st["rnnt"]
            avg["ctc"] += st["ctc"]
            avg["n"] += 1

            out_of_time = state["train_s"] >= budget_s
            if state["step"] % args.log_every == 0 or out_of_time:
                lr = scheduler.get_last_lr()[0]
                row = [
                    state["step"],
                    state["epoch"],
                    round(state["train_s"] / 60, 2),
                    round(state["hours_seen"], 3),
                    f"{lr:.5f}",
                    round(avg["rnnt"] / avg["n"], 4),
                    round(avg["ctc"] / avg["n"], 4),
                ]
                if state["step"] % args.valid_every == 0 or out_of_time:
                    v = validate(model, data, dev_idx, args.decode_n)
                    row += [round(v["rnnt"], 4), round(v["ctc"], 4), round(v["wer"], 4)]
                else:
                    row += ["", "", ""]
                writer.writerow(row)
                csv_file.flush()
                log.info(
                    "step %d epoch %d %.1f min lr %.4f rnnt %.4f ctc %.4f%s",
                    state["step"], state["epoch"], state["train_s"] / 60, lr,
                    avg["rnnt"] / avg["n"], avg["ctc"] / avg["n"],
                    f" | dev rnnt {row[7]} ctc {row[8]} wer {row[9]}" if row[7] != "" else "",
                )  # fmt: skip
                avg = {"rnnt": 0.0, "ctc": 0.0, "n": 0}
            if time.monotonic() - last_save > args.save_every_min * 60 or out_of_time:
                save(ckpt_path)
                last_save = time.monotonic()
                log.info("saved %s", ckpt_path)
            if out_of_time:
                done = True
                break
        if not done:
            state["epoch"] += 1
            state["batch_in_epoch"] = 0
    save(ckpt_path)
    csv_file.close()
    log.info("finished: %d steps, %.1f min, %.2f h of audio seen", state["step"],
             state["train_s"] / 60, state["hours_seen"])  # fmt: skip


# ----------------------------------------------------------------------------- export


# Parameters with one row per token: what a vocabulary change must slice.
VOCAB_ROWS = tuple(
    f"{layer}.{kind}"
    for layer in ("decoder.embedding", "joiner.output_linear", "simple_am_proj",
                  "simple_lm_proj", "ctc_output.1")
    for kind in ("weight", "bias")
    if (layer, kind) != ("decoder.embedding", "bias")
)  # fmt: skip


def manifest_words(manifest: Path) -> set[str]:
    """The distinct words of a manifest's transcripts."""
    if not manifest.is_file():
        raise SystemExit(
            f"--keep-words-of: {manifest} not found; give the manifest.jsonl of the data "
            "the model was last trained on (e.g. build/tts2/train/manifest.jsonl)"
        )
    rows = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    return {w for row in rows for w in row["text"].split()}


def prune_word_vocab(weights: dict, tokens: list[str], keep: set[str]) -> tuple[dict, list[str]]:
    """Drop word tokens outside `keep` from a word-vocabulary model's weights.

    Why: a run continued on data without some words (see tts.HOMOPHONES_DROPPED) still
    carries their tokens; the exported model should not be able to emit words it was
    taught never to say. The tensors indexed by token (VOCAB_ROWS) keep only the kept
    rows; they are named, not found by size, because other sizes can equal the vocabulary's.
    """
    if not is_word_vocab(tokens):
        raise ValueError(
            "--keep-words-of applies to word-vocabulary checkpoints only; "
            "export a character model without it"
        )
    rows = [0] + [i for i, tok in enumerate(tokens) if i > 0 and tok[1:] in keep]
    index = torch.tensor(rows)
    pruned = dict(weights)
    for name in VOCAB_ROWS:
        if pruned[name].shape[0] != len(tokens):
            raise ValueError(f"{name} has {pruned[name].shape[0]} rows, not {len(tokens)}")
        pruned[name] = pruned[name].index_select(0, index)
    log.info("vocabulary pruned from %d to %d tokens", len(tokens), len(rows))
    return pruned, [tokens[i] for i in rows]


def write_bpe_files(out: Path) -> None:
    """bpe.model, and bpe.vocab as sherpa-onnx's hotword encoder reads it ('piece score')."""
    sp = BPE["sp"]
    (out / "bpe.model").write_bytes(BPE["model"])  # type: ignore[arg-type]
    lines = [f"{sp.id_to_piece(i)}\t{sp.get_score(i)}\n" for i in range(sp.get_piece_size())]  # type: ignore[attr-defined]
    (out / "bpe.vocab").write_text("".join(lines), encoding="utf-8")


def export(args: argparse.Namespace) -> None:
    """Export the EMA (or raw) weights for each chunk size with the package exporter."""
    from make_test_models import export_streaming

    ckpt = torch.load(args.exp_dir / "checkpoint.pt", weights_only=False)
    weights = ckpt["ema"] if args.weights == "ema" else ckpt["model"]
    tokens = ckpt["tokens"]
    if args.keep_words_of is not None:
        try:
            weights, tokens = prune_word_vocab(weights, tokens, manifest_words(args.keep_words_of))
        except ValueError as err:
            raise SystemExit(f"export: {err}") from None
    set_vocab(tokens, ckpt.get("bpe_model"))
    model = build_model()
    model.load_state_dict({k: v.to(model.state_dict()[k].dtype) for k, v in weights.items()})
    model.eval()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    params = tiny_params(use_ctc=False, chunk=16)
    params.enable_int8_quantization = args.int8
    for chunk in EXPORT_CHUNKS:
        for f in export_streaming(model, params, out, chunk, LEFT_CONTEXT, args.head, epoch=99):
            if (
                args.int8
                and args.head == "transducer"
                and f.name.startswith(("encoder", "joiner"))
                and ".int8." not in f.name
            ):
                f.unlink()  # keep only the int8 encoder/joiner; the decoder stays fp32
    write_tokens(out / "tokens.txt", VOCAB)
    if is_bpe_vocab():
        write_bpe_files(out)
    for f in sorted(out.glob("*")):
        if f.is_file():
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
            print(f"{digest}  {f.name}  ({f.stat().st_size} bytes)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument(
        "--data",
        type=Path,
        nargs="+",
        default=[Path("build/tts")],
        help="data folders (each with train/manifest.jsonl), used together",
    )
    t.add_argument("--exp-dir", type=Path, default=Path("build/train"))
    t.add_argument("--resume", action="store_true")
    t.add_argument("--vocab", choices=("chars", "words", "bpe"), default="chars")
    t.add_argument("--bpe-size", type=int, default=256, help="pieces of a --vocab bpe model")
    t.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="start from this checkpoint's weights where shapes match (e.g. a chars run)",
    )
    t.add_argument("--seed", type=int, default=42)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--max-minutes", type=float, default=70.0)
    t.add_argument("--max-epochs", type=int, default=1000)
    t.add_argument("--max-frames", type=int, default=4000, help="padded 100 Hz frames per batch")
    t.add_argument("--base-lr", type=float, default=0.045)
    t.add_argument("--lr-batches", type=float, default=1000)
    t.add_argument("--lr-hours", type=float, default=10)
    t.add_argument("--warmup", type=float, default=300)
    t.add_argument("--batch-count-scale", type=float, default=10.0)
    t.add_argument("--ema-decay", type=float, default=0.998)
    t.add_argument("--spec-aug", type=int, default=1)
    t.add_argument("--dev-every", type=int, default=40, help="every N-th train utt is dev")
    t.add_argument("--decode-n", type=int, default=30)
    t.add_argument("--log-every", type=int, default=25)
    t.add_argument("--valid-every", type=int, default=250)
    t.add_argument("--save-every-min", type=float, default=4.0)
    e = sub.add_parser("export")
    e.add_argument("--exp-dir", type=Path, default=Path("build/train"))
    e.add_argument("--out", type=Path, default=Path("models/tiny-en"))
    e.add_argument("--weights", choices=("ema", "raw"), default="ema")
    e.add_argument("--int8", type=int, default=1)
    e.add_argument(
        "--keep-words-of",
        type=Path,
        default=None,
        help="word vocabulary: export only the words of this training manifest",
    )
    e.add_argument(
        "--head",
        choices=("transducer", "ctc"),
        default="transducer",
        help="ctc: export the auxiliary CTC head as a streaming zipformer2 CTC model",
    )
    args = parser.parse_args()
    handlers = [logging.StreamHandler()]
    if args.cmd == "train":
        args.exp_dir.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(args.exp_dir / "train.log"))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", handlers=handlers)
    log.setLevel(logging.INFO)
    if args.cmd == "train":
        train(args)
    else:
        export(args)


if __name__ == "__main__":
    main()
