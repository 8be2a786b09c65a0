"""Distributed batch norm == torch BatchNorm2d on the group's concatenated batch (forward and gradients)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from scalerepro.train.batchnorm import DistributedBatchNorm2d, convert
from scalerepro.train.model import build

CHECK = str(Path(__file__).with_name("bn_check.py"))


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("ranks", "group", "executor"),
    [
        (1, "world", "mpi"),
        (2, "world", "mpi"),
        (3, "world", "mpi"),
        (4, "world", "mpi"),
        (4, "2", "mpi"),
        (4, "1", "mpi"),
        (6, "3", "mpi"),
        (3, "world", "torch"),
        (4, "2", "torch"),
    ],
)
def test_group_batch_norm_matches_batch_norm_on_the_group_batch(run_mpi, ranks, group, executor):
    assert "OK" in run_mpi(ranks, [CHECK, group, executor]).stdout


class _Doubling:
    """A stand-in group of two ranks holding identical batches: every sum doubles."""

    size = 2

    def __call__(self, t: torch.Tensor) -> None:
        t.mul_(2)


def test_identical_halves_give_batch_norm_of_the_doubled_batch():
    torch.manual_seed(0)
    x = (1 + 3 * torch.randn(4, 6, 5, 5, dtype=torch.float64)).requires_grad_()
    dy = torch.randn_like(x)
    ours = DistributedBatchNorm2d(6, _Doubling(), dtype=torch.float64)
    ref = nn.BatchNorm2d(6, dtype=torch.float64)
    x2 = torch.cat([x.detach(), x.detach()]).requires_grad_()
    ours(x).backward(dy)
    ref(x2).backward(torch.cat([dy, dy]))
    assert torch.allclose(x.grad, x2.grad[:4])
    assert torch.allclose(ours.running_var, ref.running_var)
    assert torch.allclose(2 * ours.weight.grad, ref.weight.grad)  # affine grads stay local


def test_convert_keeps_state_dict_and_replaces_every_bn():
    model = build("resnet8", 10, 8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    convert(model, _Doubling())
    assert all(isinstance(m, DistributedBatchNorm2d) for m in model.modules() if isinstance(m, nn.BatchNorm2d))
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
