#!/usr/bin/env python3
"""Build a tiny random-weight punctuation and casing model in sherpa-onnx's online format.

sherpa-onnx's online punctuation (`sherpa_onnx.OnlinePunctuation`, the CNN-BiLSTM model of the
release `sherpa-onnx-online-punct-en-2024-08-06`) takes two files:

``model.onnx``
    Inputs, in this order (the names are free; sherpa-onnx passes them by position), all int32:
    token ids ``(N, 200)`` (each row ``1`` for ``<s>``, the BPE ids of the words, ``2`` for
    ``</s>``, zeros after), valid ids ``(N, 200)`` (1 at ``<s>``, at each word's first piece
    and at ``</s>``), label lengths ``(N,)`` (the number of 1s in that row of valid ids).
    Outputs, in this order, float32: case logits ``(W, num_cases)`` and punctuation logits
    ``(W, num_punctuations)``, one row per word of the text (``<s>`` and ``</s>`` left out),
    rows of all N sequences one after the other. The second dimension must be static:
    sherpa-onnx reads it from the output's declared shape.
    Metadata (all read, the values are fixed): ``COMMA=1``, ``PERIOD=2``, ``QUESTION=3``
    (punctuation class 0: nothing), ``UPPER=1``, ``CAP=2``, ``MIX_CASE=3`` (case class 0:
    leave the word as it is; mixed case also leaves it).

``bpe.vocab``
    SentencePiece's ``.vocab`` text (``piece<TAB>score`` per line, the line number is the id),
    read by simple-sentencepiece. Ids 1 and 2 are ``<s>`` and ``</s>``.

The text is split on whitespace; each word is encoded on its own. The released model's
vocabulary is lower case, so callers lower-case the text first.

This model: embedding 16, one 1-D convolution, one bidirectional LSTM of 8 units each way,
two linear heads; random weights from seed 20261202, the heads' weights scaled up and their
biases set so that the output shows every kind of mark and case. Its output is meaningless
but deterministic: it tests the plumbing (loading, passing text, replacing finals), never
quality.

Usage (needs torch, onnx)::

    python scripts/make_punct_model.py            # writes models/tiny-punct-en/
"""

from __future__ import annotations

import argparse
from pathlib import Path

import onnx
import torch
from torch import nn

SEED = 20261202
HEAD_SCALE = 30.0
MAX_SEQ_LEN = 200  # sherpa-onnx's kMaxSeqLen
BOUNDARY = "\u2581"
NUM_CASES = 4  # none, upper, cap, mixed
NUM_PUNCTUATIONS = 4  # none, comma, period, question
METADATA = {"COMMA": "1", "PERIOD": "2", "QUESTION": "3", "UPPER": "1", "CAP": "2", "MIX_CASE": "3"}

# Whole-word pieces first (higher score: merged first), then letters.
WORDS = ["the", "and", "you", "how", "are", "is", "it", "to", "a", "i", "hello", "world"]
LETTERS = list("abcdefghijklmnopqrstuvwxyz'")


def vocabulary() -> list[tuple[str, float]]:
    pieces: list[tuple[str, float]] = [("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0)]
    pieces += [(BOUNDARY + w, -1.0 - i * 0.01) for i, w in enumerate(WORDS)]
    pieces.append((BOUNDARY, -2.0))
    pieces += [(c, -3.0 - i * 0.01) for i, c in enumerate(LETTERS)]
    return pieces


class TinyPunct(nn.Module):
    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, 16)
        self.conv = nn.Conv1d(16, 16, kernel_size=3, padding=1)
        self.lstm = nn.LSTM(16, 8, batch_first=True, bidirectional=True)
        self.case_head = nn.Linear(16, NUM_CASES)
        self.punct_head = nn.Linear(16, NUM_PUNCTUATIONS)

    def forward(
        self, token_ids: torch.Tensor, valid_ids: torch.Tensor, label_lens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embed(token_ids.long())
        x = torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)
        x, _ = self.lstm(x)
        valid = valid_ids.long()
        rank = torch.cumsum(valid, dim=1)  # 1 at <s>, label_len at </s>
        word = (valid == 1) & (rank > 1) & (rank < label_lens.long().unsqueeze(1))
        rows = x[word]  # (W, 16), sequences one after the other
        return self.case_head(rows), self.punct_head(rows)


def build(out_dir: Path) -> None:
    torch.manual_seed(SEED)
    pieces = vocabulary()
    model = TinyPunct(len(pieces)).eval()
    with torch.no_grad():
        # Random heads give logits within ~0.1 of each other, so one bias would pick the
        # same class everywhere: scale the weights up so the words decide, and leave out
        # mixed case (which changes nothing) and make "no mark" the most common.
        model.case_head.weight.mul_(HEAD_SCALE)
        model.punct_head.weight.mul_(HEAD_SCALE)
        model.case_head.bias.copy_(torch.tensor([0.5, -0.5, 0.0, -20.0]))
        model.punct_head.bias.copy_(torch.tensor([3.0, 0.0, 1.0, -1.0]))
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "bpe.vocab", "w", encoding="utf-8") as f:
        for piece, score in pieces:
            f.write(f"{piece}\t{score}\n")

    tokens = torch.zeros(1, MAX_SEQ_LEN, dtype=torch.int32)
    tokens[0, :4] = torch.tensor([1, 5, 6, 2])
    valid = torch.zeros(1, MAX_SEQ_LEN, dtype=torch.int32)
    valid[0, :4] = 1
    lens = torch.tensor([4], dtype=torch.int32)
    path = out_dir / "model.onnx"
    torch.onnx.export(
        model,
        (tokens, valid, lens),
        str(path),
        input_names=["token_ids", "valid_ids", "label_lens"],
        output_names=["case_logits", "punct_logits"],
        dynamic_axes={
            "token_ids": {0: "N"},
            "valid_ids": {0: "N"},
            "label_lens": {0: "N"},
            "case_logits": {0: "W"},
            "punct_logits": {0: "W"},
        },
        opset_version=17,
        dynamo=False,
    )
    proto = onnx.load(str(path))
    for key, value in METADATA.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    # sherpa-onnx reads the class counts from the outputs' declared second dimension.
    for output, count in zip(proto.graph.output, (NUM_CASES, NUM_PUNCTUATIONS), strict=True):
        dims = output.type.tensor_type.shape.dim
        del dims[:]
        dims.add().dim_param = "W"
        dims.add().dim_value = count
    proto.doc_string = f"tiny random punctuation model, seed {SEED}"
    onnx.save(proto, str(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parent.parent
    parser.add_argument("--out", type=Path, default=root / "models" / "tiny-punct-en")
    build(parser.parse_args().out)


if __name__ == "__main__":
    main()
