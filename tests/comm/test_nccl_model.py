"""NCCL's model (what the simulator and cost model run for ``nccl``): a correct all-reduce, one ring per adapter."""

from __future__ import annotations

import numpy as np
import pytest

from scalerepro.comm import nccl
from scalerepro.comm.costterms import schedules
from scalerepro.comm.schedule import Send, Spec, every_rank, interpret


def _nodes(p: int, g: int) -> tuple[int, ...]:
    return tuple(r // g for r in range(p))


@pytest.mark.parametrize(("p", "g", "rails"), [(8, 4, 2), (12, 4, 3), (16, 8, 8), (6, 3, 1), (4, 4, 2), (9, 3, 5)])
@pytest.mark.parametrize("count", [1, 7, 1003])
def test_the_model_sums_random_floats_on_every_rank(p, g, rails, count):
    spec = Spec(p, 0, count, chunk_bytes=1 << 62, nodes=_nodes(p, g), rails=rails)
    rng = np.random.default_rng([p, count])
    inputs = [rng.standard_normal(count).astype(np.float32) for _ in range(p)]
    buffers = [x.copy() for x in inputs]
    interpret(every_rank(nccl.model, spec), buffers)
    want = np.sum(np.stack([x.astype(np.float64) for x in inputs]), axis=0)
    bound = (p - 1) * np.finfo(np.float32).eps * np.sum(np.abs(np.stack(inputs)), axis=0)
    for r, buf in enumerate(buffers):
        assert np.all(np.abs(buf - want) <= bound), f"rank {r}"
        assert np.array_equal(buf, buffers[0]), f"rank {r} differs from rank 0"


def _crossings(spec: Spec) -> set[tuple[int, int, int]]:
    """(lane, sender's local rank, receiver's local rank) of every message between nodes."""
    g = spec.p // len(set(spec.nodes))
    out = set()
    for r, sched in enumerate(every_rank(nccl.model, spec)):
        for lane_index, lane in enumerate(sched.lanes):
            for stage in lane:
                for step in stage:
                    if isinstance(step, Send) and spec.nodes[step.peer] != spec.nodes[r]:
                        out.add((lane_index, r % g, step.peer % g))
    return out


def test_each_channel_leaves_a_node_through_its_own_adapter():
    spec = Spec(16, 0, 4096, chunk_bytes=1 << 62, nodes=_nodes(16, 4), rails=2)
    crossings = _crossings(spec)
    assert crossings == {(0, 0, 1), (1, 1, 2)}  # channel c sends from local rank c, received by local rank c + 1
    senders = {src % 2 for _, src, _ in crossings}
    receivers = {dst % 2 for _, _, dst in crossings}
    assert senders == receivers == {0, 1}  # both adapters send and both receive


def test_one_node_or_one_adapter_is_one_ring():
    assert len(nccl.model(Spec(8, 0, 4096, chunk_bytes=1 << 62, rails=8)).lanes) == 1
    assert len(nccl.model(Spec(8, 0, 4096, chunk_bytes=1 << 62, nodes=_nodes(8, 4), rails=1)).lanes) == 1


def test_a_collective_alone_in_its_lane_becomes_the_models_lanes_side_by_side():
    spec = Spec(8, 0, 4096, chunk_bytes=1 << 62, nodes=_nodes(8, 4), rails=2)
    ranks = list(schedules("nccl", spec, "torch"))
    assert [len(s.lanes) for s in ranks] == [2] * 8
    assert [len(s.lanes) for s in schedules("gloo", spec, "torch")] == [1] * 8  # gloo: the executor's ring
