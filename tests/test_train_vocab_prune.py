"""Pruning a word vocabulary at export keeps every kept word's scores unchanged.

Why: the bundled model was trained on, then continued on data without some homophones;
its export drops those words' tokens (scripts/train_tiny_model.py, --keep-words-of). If
the pruning picked the wrong rows, the model would silently emit the wrong words.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import train_tiny_model as ttm  # noqa: E402

WORDS = ["AND", "HAND", "KNEW", "NEW", "TO", "TWO"]
KEEP = {"AND", "NEW", "TWO", "NOT-IN-VOCAB"}


@pytest.fixture
def full_model() -> tuple[torch.nn.Module, list[str]]:
    tokens = ttm.word_vocab(WORDS)
    ttm.set_vocab(tokens)
    torch.manual_seed(0)
    model = ttm.build_model()
    model.eval()
    return model, tokens


def joiner_scores(model: torch.nn.Module, context: list[int]) -> torch.Tensor:
    """Joiner log-probs for a fixed encoder frame after the given decoder context."""
    torch.manual_seed(1)
    enc = torch.randn(1, 1, model.joiner.encoder_proj.in_features)
    with torch.no_grad():
        dec = model.decoder(torch.tensor([context]), need_pad=False)
        logits = model.joiner(enc, dec)
    return logits.log_softmax(-1).flatten()


def test_pruned_model_scores_kept_words_exactly_as_before(full_model) -> None:
    model, tokens = full_model
    pruned_weights, pruned_tokens = ttm.prune_word_vocab(model.state_dict(), tokens, KEEP)
    assert pruned_tokens == ["<blk>", "▁AND", "▁NEW", "▁TWO"]

    ttm.set_vocab(pruned_tokens)
    pruned = ttm.build_model()
    pruned.load_state_dict(pruned_weights)  # strict: every tensor has the pruned shape
    pruned.eval()

    old_id = {tok: i for i, tok in enumerate(tokens)}
    kept_old_ids = [old_id[tok] for tok in pruned_tokens]
    # the same history ("AND NEW") in each model's own ids
    before = joiner_scores(model, [old_id["▁AND"], old_id["▁NEW"]])
    after = joiner_scores(pruned, [1, 2])
    raw_before = before[kept_old_ids]
    # log-softmax renormalises over fewer tokens: differences between kept tokens are equal
    torch.testing.assert_close(after - after[0], raw_before - raw_before[0])


def test_pruning_refuses_a_character_vocabulary() -> None:
    with pytest.raises(ValueError, match="word-vocabulary"):
        ttm.prune_word_vocab({}, ["<blk>", "▁", "A", "B"], {"A"})
