"""The large-batch recipe: linear LR scaling, warm-up, poly/step decay, momentum SGD or LARS.

Weight decay and LARS apply to conv and linear weights only; batch-norm
parameters and biases get plain momentum SGD without decay (Goyal et al.
2017; You et al. 2017; Ying et al. 2018).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from scalerepro.config import TrainConfig


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Conv/linear weights (decayed, LARS) and batch-norm/bias parameters (neither)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    return [
        {"params": decay, "weight_decay": weight_decay, "lars": True},
        {"params": no_decay, "weight_decay": 0.0, "lars": False},
    ]


class LARS(torch.optim.Optimizer):
    """Momentum SGD with a layer-wise trust ratio eta * |w| / (|g| + wd * |w|) on groups marked ``lars``.

    v <- m * v + lr * trust * (g + wd * w);  w <- w - v  (Nesterov: w <- w - (m * v + lr * trust * (g + wd * w))).
    """

    def __init__(self, params: Iterable[Any], lr: float, momentum: float, eta: float, nesterov: bool) -> None:
        """Groups may set ``weight_decay`` and ``lars`` (default True)."""
        super().__init__(
            params,
            {"lr": lr, "momentum": momentum, "eta": eta, "nesterov": nesterov, "weight_decay": 0.0, "lars": True},
        )

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]  # noqa: ARG002 (torch's signature; returns no loss, takes no closure)
        """One update of every parameter that has a gradient."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, p.grad, group)

    def _update(self, p: torch.Tensor, grad: torch.Tensor, group: dict[str, Any]) -> None:
        """The LARS (or plain momentum) update of parameter ``p`` from its gradient ``grad``."""
        wd = group["weight_decay"]
        scale = group["lr"]
        if group["lars"]:
            w_norm, g_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(grad)
            trust = torch.where(
                (w_norm > 0) & (g_norm > 0), group["eta"] * w_norm / (g_norm + wd * w_norm), torch.ones_like(w_norm)
            )
            scale = scale * trust
        update = grad.add(p, alpha=wd) if wd else grad.clone()
        update.mul_(scale)
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = update.clone()
        else:
            state["momentum_buffer"].mul_(group["momentum"]).add_(update)
        buf = state["momentum_buffer"]
        p.sub_(update.add_(buf, alpha=group["momentum"]) if group["nesterov"] else buf)


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """The configured optimizer over ``model``'s parameter groups (its rate is set every step)."""
    groups = param_groups(model, cfg.weight_decay)
    if cfg.optimizer == "lars":
        return LARS(groups, lr=cfg.base_lr, momentum=cfg.momentum, eta=cfg.lars_eta, nesterov=cfg.nesterov)
    for g in groups:
        g.pop("lars")
    return torch.optim.SGD(groups, lr=cfg.base_lr, momentum=cfg.momentum, nesterov=cfg.nesterov)


def peak_lr(cfg: TrainConfig, world: int) -> float:
    """base_lr scaled linearly with the global batch (Goyal et al. 2017)."""
    return cfg.base_lr * world * cfg.batch_per_rank / cfg.reference_batch


def learning_rate(cfg: TrainConfig, world: int, step: int, steps_per_epoch: int) -> float:
    """Linear warm-up to the scaled peak, then the configured poly or step decay."""
    peak = peak_lr(cfg, world)
    warm = cfg.warmup_epochs * steps_per_epoch
    if step < warm:
        return peak * (step + 1) / warm
    if cfg.lr_schedule == "step":
        passed = bisect.bisect_right(sorted(cfg.decay_epochs), step / steps_per_epoch)
        return peak * cfg.decay_factor**passed
    total = cfg.epochs * steps_per_epoch
    progress = min(1.0, (step - warm) / max(1.0, total - warm))
    return peak * float((1.0 - progress) ** cfg.poly_power)  # float: the base is in [0, 1], never complex


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    """Set every group's rate."""
    for group in opt.param_groups:
        group["lr"] = lr
