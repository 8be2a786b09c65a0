"""LARS against its formula, the schedules, no decay or LARS on batch norm and bias."""

from __future__ import annotations

import pytest
import torch

from scalerepro.config import from_mapping
from scalerepro.train.model import build
from scalerepro.train.optim import LARS, build_optimizer, learning_rate


def test_lars_follows_the_trust_ratio_formula_and_skips_excluded_groups():
    w, b = torch.nn.Parameter(torch.tensor([3.0, 4.0])), torch.nn.Parameter(torch.tensor([1.0]))
    opt = LARS(
        [{"params": [w], "weight_decay": 0.1, "lars": True}, {"params": [b], "weight_decay": 0.0, "lars": False}],
        lr=0.5,
        momentum=0.9,
        eta=0.01,
        nesterov=False,
    )
    for _ in range(2):
        w.grad, b.grad = torch.tensor([0.6, 0.8]), torch.tensor([2.0])
        w_before = w.detach().clone()
        opt.step()
    # step 1: trust = 0.01 * 5 / (1 + 0.1 * 5) = 1/30; v1 = 0.5/30 * (g + 0.1 w)
    # step 2 at the updated w: v2 = 0.9 v1 + 0.5 * trust2 * (g + 0.1 w1)
    w0 = torch.tensor([3.0, 4.0])
    g = torch.tensor([0.6, 0.8])
    v1 = 0.5 / 30 * (g + 0.1 * w0)
    w1 = w0 - v1
    trust2 = 0.01 * w1.norm() / (g.norm() + 0.1 * w1.norm())
    v2 = 0.9 * v1 + 0.5 * trust2 * (g + 0.1 * w1)
    assert torch.allclose(w_before, w1)
    assert torch.allclose(w.detach(), w1 - v2)
    assert torch.allclose(b.detach(), torch.tensor([1.0 - 1.0 - (0.9 * 1.0 + 1.0)]))  # plain momentum: v=lr*g


def test_build_optimizer_groups_and_types():
    model = build("resnet8", 10, 8)
    sgd = build_optimizer(model, from_mapping({"train": {"weight_decay": 1e-4}}).train)
    lars = build_optimizer(model, from_mapping({"train": {"optimizer": "lars"}}).train)
    assert isinstance(sgd, torch.optim.SGD)
    assert sgd.param_groups[0]["nesterov"]
    assert sgd.param_groups[1]["weight_decay"] == 0
    assert isinstance(lars, LARS)
    assert [g["lars"] for g in lars.param_groups] == [True, False]
    assert all(p.ndim <= 1 for p in lars.param_groups[1]["params"])


def test_step_schedule_and_poly_power():
    step = from_mapping(
        {
            "train": {
                "lr_schedule": "step",
                "decay_epochs": [2, 3],
                "decay_factor": 0.1,
                "epochs": 4,
                "warmup_epochs": 1,
                "base_lr": 0.1,
                "reference_batch": 32,
                "batch_per_rank": 32,
            }
        }
    ).train
    lrs = [learning_rate(step, 1, s, 10) for s in range(40)]
    assert lrs[9] == pytest.approx(0.1)
    assert lrs[10] == pytest.approx(0.1)
    assert lrs[20] == pytest.approx(0.01)
    assert lrs[30] == pytest.approx(0.001)
    poly = from_mapping(
        {
            "train": {
                "poly_power": 2,
                "epochs": 3,
                "warmup_epochs": 1,
                "base_lr": 0.1,
                "reference_batch": 32,
                "batch_per_rank": 32,
            }
        }
    ).train
    assert learning_rate(poly, 1, 20, 10) == pytest.approx(0.1 * 0.5**2)
