"""RNN-T (transducer) loss in plain PyTorch.

Why: the ``zipformer`` package computes its transducer loss with k2 (pruned RNN-T),
and neither k2 nor torchaudio installs beside the CPU torch 2.13 used here. With a
character vocabulary the full joint network output (N, T, U+1, V) is small, so the
exact loss is affordable.

The forward variable alpha(t, u) = log P(first u labels emitted by the end of frame t)
satisfies alpha(t, u) = logaddexp(alpha(t-1, u) + blank(t-1, u),
alpha(t, u-1) + emit(t, u-1)). Unrolling the u-recursion within one frame gives

    alpha(t, u) = C(t, u) + logcumsumexp_k<=u [alpha(t-1, k) + blank(t-1, k) - C(t, k)]

with C(t, u) = sum_{j<u} emit(t, j). So one ``logcumsumexp`` per frame, vectorised over
batch and labels, and autograd provides the gradient. The recursion runs in float64
because C grows large and negative and the subtraction above would lose precision
in float32.
"""

from __future__ import annotations

import math

import torch


def rnnt_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    logit_lengths: torch.Tensor,
    target_lengths: torch.Tensor,
    blank: int = 0,
    reduction: str = "sum",
) -> torch.Tensor:
    """Negative log-likelihood of ``targets`` under a transducer.

    Args:
      logits: (N, T, U+1, V) joiner outputs (unnormalised), U = max target length.
      targets: (N, U) int64 label ids, padded with anything (e.g. blank).
      logit_lengths: (N,) number of valid frames per sequence (>= 1).
      target_lengths: (N,) number of valid labels per sequence.
      blank: id of the blank symbol.
      reduction: "sum", "mean" or "none".
    """
    n, t_max, u1, _ = logits.shape
    if targets.shape != (n, u1 - 1):
        raise ValueError(
            f"targets {tuple(targets.shape)} do not match logits {tuple(logits.shape)}"
        )
    log_probs = logits.log_softmax(dim=-1)
    blank_lp = log_probs[..., blank].double()  # (N, T, U+1)
    if u1 > 1:
        idx = targets.long().clamp(min=0)[:, None, :, None].expand(n, t_max, u1 - 1, 1)
        emit_lp = log_probs[:, :, :-1, :].gather(-1, idx).squeeze(-1).double()  # (N, T, U)
    else:
        emit_lp = blank_lp.new_zeros((n, t_max, 0))
    # C(t, u) = sum_{j<u} emit(t, j): (N, T, U+1)
    cum = torch.cat([emit_lp.new_zeros((n, t_max, 1)), emit_lp.cumsum(dim=-1)], dim=-1)

    alphas = [cum[:, 0]]  # alpha(0, u): only emissions at frame 0
    for t in range(1, t_max):
        prev = alphas[-1] + blank_lp[:, t - 1] - cum[:, t]
        alphas.append(cum[:, t] + torch.logcumsumexp(prev, dim=-1))
    alpha = torch.stack(alphas, dim=1)  # (N, T, U+1)

    batch = torch.arange(n, device=logits.device)
    t_last = logit_lengths.long() - 1
    u_last = target_lengths.long()
    loglik = alpha[batch, t_last, u_last] + blank_lp[batch, t_last, u_last]
    nll = -loglik.to(logits.dtype)
    if reduction == "sum":
        return nll.sum()
    if reduction == "mean":
        return nll.mean()
    if reduction == "none":
        return nll
    raise ValueError(f"unknown reduction {reduction!r}")


def _reference_rnnt_nll(logits: torch.Tensor, targets: list[int], blank: int = 0) -> float:
    """Plain double loop over (t, u) for one sequence; used to check rnnt_loss."""
    lp = logits.double().log_softmax(-1)
    t_max, u1, _ = lp.shape
    neg_inf = float("-inf")
    alpha = [[neg_inf] * u1 for _ in range(t_max)]
    alpha[0][0] = 0.0
    for t in range(t_max):
        for u in range(u1):
            if t == 0 and u == 0:
                continue
            a = alpha[t - 1][u] + float(lp[t - 1, u, blank]) if t > 0 else neg_inf
            b = alpha[t][u - 1] + float(lp[t, u - 1, targets[u - 1]]) if u > 0 else neg_inf
            hi, lo = max(a, b), min(a, b)
            alpha[t][u] = hi if lo == neg_inf else hi + math.log1p(math.exp(lo - hi))
    return -(alpha[t_max - 1][u1 - 1] + float(lp[t_max - 1, u1 - 1, blank]))


if __name__ == "__main__":
    # Self-check: batched loss and its gradient against the plain double loop.
    torch.manual_seed(0)
    n, t_max, u_max, v = 3, 7, 4, 6
    logits = torch.randn(n, t_max, u_max + 1, v, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(1, v, (n, u_max))
    t_lens = torch.tensor([7, 5, 3])
    u_lens = torch.tensor([4, 2, 0])
    got = rnnt_loss(logits, targets, t_lens, u_lens, reduction="none")
    for i in range(n):
        ref = _reference_rnnt_nll(
            logits[i, : t_lens[i], : u_lens[i] + 1].detach(), targets[i, : u_lens[i]].tolist()
        )
        print(f"seq {i}: batched {got[i].item():.6f} reference {ref:.6f}")
        if abs(got[i].item() - ref) > 1e-6:
            raise SystemExit("MISMATCH")
    if not torch.autograd.gradcheck(
        lambda x: rnnt_loss(x, targets, t_lens, u_lens), (logits,), eps=1e-6, atol=1e-5
    ):
        raise SystemExit("gradient check failed")
    print("rnnt_loss matches the reference and passes gradcheck")
