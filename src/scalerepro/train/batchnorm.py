"""Distributed batch norm (Ying et al. 2018): statistics summed over groups of consecutive ranks.

A group of G ranks normalises with the mean and variance of all G local
batches together. Forward sums (sum, sum of squares, count) per channel
over the group; backward sums (sum of dy, sum of dy * x_hat) the same
way, so the input gradient is that of batch norm over the group's
concatenated batch. The affine parameters' gradients stay local: the
gradient all-reduce sums them with every other gradient. G = 1 is plain
local batch norm (torch's own kernel); G = world is global batch norm.
torch's SyncBatchNorm refuses CPU tensors, hence this module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from scalerepro.comm.context import Context


class GroupReduce(Protocol):
    """Sums a small tensor in place over the ranks of one batch-norm group."""

    @property
    def size(self) -> int:
        """How many ranks the group has."""

    def __call__(self, t: torch.Tensor) -> None:
        """In-place sum over the group."""


@dataclass(frozen=True)
class GroupSum:
    """GroupReduce of ``size`` ranks from a sum function (the library's all-reduce on the group's Context)."""

    reduce: Callable[[torch.Tensor], None]
    size: int

    def __call__(self, t: torch.Tensor) -> None:
        """Sum ``t`` over the group (nothing to do alone)."""
        if self.size > 1:
            self.reduce(t)


def bn_context(ctx: Context, group: int) -> Context:
    """A Context over this rank's batch-norm group: ranks [g*G, (g+1)*G) for g = rank // G.

    It shares ``ctx``'s torch.distributed process groups, so on a GPU its sums are NCCL's on a cached sub-group.
    """
    sub = ctx.split(("bn-group", group), ctx.rank // group, ctx.rank)
    return Context(sub, ctx.params, parent=ctx)


def _channel_dims(x: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(dimensions summed per channel, broadcast shape of a per-channel vector)."""
    return (0, *range(2, x.dim())), (1, x.shape[1]) + (1,) * (x.dim() - 2)


class _GroupBatchNorm(torch.autograd.Function):
    """Batch norm whose statistics, and their backward terms, are summed over a group."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, group: GroupReduce
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """y = (x - mean) / sqrt(var + eps) * weight + bias over the group's batch; also (mean, var, count)."""
        dims, shape = _channel_dims(x)
        c = x.shape[1]
        stats = torch.empty(2 * c + 1, dtype=torch.float64, device=x.device)
        stats[:c] = x.sum(dims, dtype=torch.float64)
        stats[c : 2 * c] = x.square().sum(dims, dtype=torch.float64)
        stats[2 * c] = x.numel() // c
        group(stats)
        count = stats[2 * c :].clone()
        mean = stats[:c] / count
        var = (stats[c : 2 * c] / count - mean * mean).clamp_(min=0)
        invstd = (var + eps).rsqrt().to(x.dtype)
        xhat = (x - mean.to(x.dtype).view(shape)) * invstd.view(shape)
        y = xhat * weight.view(shape) + bias.view(shape)
        ctx.save_for_backward(xhat, weight, invstd, count)
        ctx.group = group
        ctx.mark_non_differentiable(mean, var, count)
        return y, mean, var, count

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor, *_: Any) -> tuple[Any, ...]:
        """dx from the group-summed (sum dy, sum dy * x_hat); d weight, d bias from this rank's batch."""
        xhat, weight, invstd, count = ctx.saved_tensors
        dims, shape = _channel_dims(dy)
        c = dy.shape[1]
        sums = torch.empty(2 * c, dtype=torch.float64, device=dy.device)
        sums[:c] = dy.sum(dims, dtype=torch.float64)
        sums[c:] = (dy * xhat).sum(dims, dtype=torch.float64)
        dbias, dweight = sums[:c].to(weight.dtype, copy=True), sums[c:].to(weight.dtype, copy=True)  # before the sum
        ctx.group(sums)
        mean_dy = (sums[:c] / count).to(dy.dtype).view(shape)
        mean_dyx = (sums[c:] / count).to(dy.dtype).view(shape)
        dx = (dy - mean_dy - xhat * mean_dyx) * (weight * invstd).view(shape)
        return dx, dweight, dbias, None, None


class DistributedBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d with statistics over a group of ranks; same parameters, buffers and state_dict keys."""

    def __init__(
        self, num_features: int, group: GroupReduce, eps: float = 1e-5, momentum: float | None = 0.1, **factory: Any
    ) -> None:
        """Affine batch norm with running statistics, summed over ``group`` (``factory``: device, dtype)."""
        super().__init__(num_features, eps=eps, momentum=momentum, **factory)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Group statistics in training (running ones updated from them); running statistics in eval."""
        if not self.training or self.group.size == 1:
            return super().forward(x)
        out: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
        out = _GroupBatchNorm.apply(x, self.weight, self.bias, self.eps, self.group)
        y, mean, var, count = out
        tracked, running_mean, running_var = self.num_batches_tracked, self.running_mean, self.running_var
        # __init__ keeps torch's default track_running_stats=True, so the buffers exist
        assert tracked is not None
        assert running_mean is not None
        assert running_var is not None
        with torch.no_grad():
            tracked.add_(1)
            m = self.momentum if self.momentum is not None else 1.0 / float(tracked)
            n = count.to(var.dtype)
            running_mean.mul_(1 - m).add_(mean.to(running_mean.dtype), alpha=m)
            running_var.mul_(1 - m).add_((var * n / (n - 1).clamp(min=1)).to(running_var.dtype), alpha=m)
        return y


def convert(module: nn.Module, group: GroupReduce) -> nn.Module:
    """Replace every nn.BatchNorm2d in ``module`` by a DistributedBatchNorm2d over ``group``, keeping its state."""
    if isinstance(module, nn.BatchNorm2d) and not isinstance(module, DistributedBatchNorm2d):
        if not module.affine or not module.track_running_stats:
            raise ValueError("distributed batch norm needs affine=True and track_running_stats=True")
        new = DistributedBatchNorm2d(
            module.num_features,
            group,
            module.eps,
            module.momentum,
            device=module.weight.device,
            dtype=module.weight.dtype,
        )
        new.load_state_dict(module.state_dict())
        new.train(module.training)
        return new
    for name, child in module.named_children():
        setattr(module, name, convert(child, group))
    return module
