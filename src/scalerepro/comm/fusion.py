"""Gradient fusion: how a model's gradients are cut into all-reduce buckets, one rule for training and simulation.

Gradients are taken in reverse parameter order (the order the backward
pass produces them) and packed into buckets of at most ``cap`` bytes; a
gradient larger than the cap gets a bucket of its own, and no gradient is
split. Training (:class:`scalerepro.train.buckets.Buckets`) and the
simulated step (:mod:`scalerepro.sim.timeline`) both cut with :func:`cut`,
so the simulated buckets are the ones training sums.
"""

from __future__ import annotations

from collections.abc import Sequence


def cut(nbytes: Sequence[int], cap: int) -> list[list[int]]:
    """Indices into ``nbytes`` (already in backward order) grouped into buckets of at most ``cap`` bytes each.

    A bucket closes when the next gradient would take it past ``cap``; every
    bucket holds at least one gradient.
    """
    groups: list[list[int]] = [[]]
    size = 0
    for i, n in enumerate(nbytes):
        if groups[-1] and size + n > cap:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += n
    return groups if groups[0] else []
