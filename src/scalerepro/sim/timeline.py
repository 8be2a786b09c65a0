"""A training step of ResNet-50 as a timeline: forward, the backward pass releasing gradient buckets, their sums.

The compute of a step (one per-rank batch at the platform's ResNet-50
rate) is spread over the network's layers in proportion to their FLOPs,
counted by torch's FLOP counter on torchvision's ResNet-50 (forward, then
backward, on the meta device: shapes only, nothing computed). A gradient is
ready when the backward pass has done the FLOPs that precede it; buckets
are cut as training cuts them (:func:`scalerepro.comm.fusion.cut`, on the
parameters in reverse order), and a bucket is ready with the last of its
gradients autograd produces. Then, per the platform's
``overlap``:

- ``buckets``: each bucket's all-reduce starts when it is ready and the one
  before it has finished (one communication stream, as the project's
  overlapped training does; DDP also caps its first bucket at 1 MiB, which
  this does not model); the step ends at the later of the backward pass and
  the last all-reduce, plus the optimizer.
- ``none``: the gradients are summed after the backward pass, bucket after
  bucket (TensorFlow's cross-replica sum, Torch's summed gradients of 2017).

How much of the all-reduce hid behind the backward pass is an output,
not an input. Time is taken to be proportional to FLOPs within the step; the
layers that do few FLOPs but move much memory (batch norm, ReLU) are
therefore charged to the convolutions around them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from scalerepro.comm.fusion import cut
from scalerepro.errors import UserError

OVERLAP_MODES = ("none", "buckets")
OPTIMIZER_BYTES_PER_PARAMETER = 5 * 4  # SGD with momentum, float32: read weight, gradient, momentum; write two


@dataclass(frozen=True)
class Model:
    """A network's FLOPs per image and its parameters in reverse order, each with the backward FLOPs before it."""

    forward_flops: float
    backward_flops: float
    numels: tuple[int, ...]  # parameters in reverse order, as training cuts buckets (comm.fusion)
    ready: tuple[float, ...]  # backward FLOPs done when each one's gradient is ready (per image)

    @property
    def parameters(self) -> int:
        """How many numbers the model trains."""
        return sum(self.numels)


@dataclass(frozen=True)
class Bucket:
    """One gradient bucket: its bytes and the fraction of the backward pass done when it is ready."""

    nbytes: int
    ready: float


@lru_cache(maxsize=1)
def resnet50() -> Model:
    """torchvision's ResNet-50 counted by torch's FLOP counter (batch 1, 224 x 224), in backward order."""
    import torch
    import torchvision
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = torchvision.models.resnet50()
        image = torch.empty(1, 3, 224, 224)
    forward = FlopCounterMode(display=False)
    with forward:
        loss = model(image).sum()
    backward = FlopCounterMode(display=False)
    done: dict[int, int] = {}  # parameter -> backward FLOPs counted when its gradient was accumulated
    params = list(model.parameters())

    def record(p: torch.Tensor) -> None:
        done.setdefault(id(p), backward.get_total_flops())

    for p in params:
        p.register_post_accumulate_grad_hook(record)
    with backward:
        loss.backward()
    order = params[::-1]  # training's order (comm.fusion): reversed parameters, whatever order autograd ran
    return Model(
        float(forward.get_total_flops()),
        float(backward.get_total_flops()),
        tuple(p.numel() for p in order),
        tuple(float(done[id(p)]) for p in order),
    )


def buckets(model: Model, itemsize: int, bucket_mib: float) -> list[Bucket]:
    """The model's gradient buckets as training cuts them, in the order they become ready."""
    sizes = [n * itemsize for n in model.numels]
    return [
        Bucket(sum(sizes[i] for i in group), max(model.ready[i] for i in group) / model.backward_flops)
        for group in cut(sizes, int(bucket_mib * 2**20))
    ]


@dataclass(frozen=True)
class Step:
    """One simulated step: its length, what it is made of, and how much of the all-reduce hid."""

    step_s: float
    compute_s: float
    optimizer_s: float
    allreduce_s: float  # the buckets' all-reduces end to end, as if nothing overlapped
    exposed_s: float  # the part of the step spent waiting on the all-reduce

    @property
    def hidden(self) -> float:
        """Fraction of the all-reduce time that ran behind the backward pass (0 without overlap)."""
        return 1 - self.exposed_s / self.allreduce_s if self.allreduce_s > 0 else 1.0


def step(
    model: Model, ready: Sequence[Bucket], seconds: Sequence[float], compute_s: float, optimizer_s: float, overlap: str
) -> Step:
    """The step of one rank: ``compute_s`` of forward and backward, bucket i summed in ``seconds[i]``.

    ``overlap`` is one of :data:`OVERLAP_MODES` (see the module's docstring).
    """
    if overlap not in OVERLAP_MODES:
        raise UserError(f"overlap {overlap!r}: choose one of {', '.join(OVERLAP_MODES)}")
    forward_s = compute_s * model.forward_flops / (model.forward_flops + model.backward_flops)
    backward_s = compute_s - forward_s
    end = compute_s
    if overlap == "buckets":
        end = forward_s
        for bucket, t in zip(ready, seconds, strict=True):
            end = max(end, forward_s + bucket.ready * backward_s) + t
        end = max(end, compute_s)
    else:
        end += sum(seconds)
    return Step(end + optimizer_s, compute_s, optimizer_s, float(sum(seconds)), end - compute_s)


def optimizer_seconds(parameters: int, gamma_s_per_byte: float) -> float:
    """An SGD-with-momentum update of ``parameters`` float32 weights at the memory bandwidth gamma implies.

    gamma is 3 / memory bandwidth (an add reads two bytes and writes one),
    so the update's bytes take bytes x gamma / 3.
    """
    return parameters * OPTIMIZER_BYTES_PER_PARAMETER * gamma_s_per_byte / 3
