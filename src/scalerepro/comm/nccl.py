"""``nccl``: torch.distributed's all_reduce on NCCL, the GPU baseline the other algorithms are held to.

The executor calls NCCL; the simulator and the cost model cannot, so they
run :func:`model` in its place: NCCL's ring with one channel per network
adapter. NCCL cuts a buffer over several channels, each a ring through
every rank, and routes the channels' node crossings through different
adapters, so a node's adapters carry the all-reduce together (a DGX-1's
four adapters give about four times one adapter's bus bandwidth,
``nccl-tests-issue29#multi-adapter``). NCCL's tree algorithm, its protocols
and any per-channel limit are not modelled.
"""

from __future__ import annotations

from scalerepro.comm.schedule import (
    EMPTY,
    Schedule,
    Spec,
    check_uniform_nodes,
    pieces,
    pipelined,
    world_collective,
)

NAME = "nccl"
EXECUTOR = "torch"
DEVICE = "cuda"  # NCCL sums GPU memory; a CPU buffer's counterpart is gloo


def schedule(spec: Spec) -> Schedule:
    """One NCCL all_reduce over every rank."""
    return world_collective(spec)


def model(spec: Spec) -> Schedule:
    """NCCL's ring as simulated: on several nodes, ``spec.rails`` channels (at most the ranks per node).

    Channel c visits the nodes in turn and each node's ranks rotated so
    that it leaves the node through local rank c (adapter c mod rails) and
    enters the next through local rank c + 1: every adapter sends one
    channel and receives another. On one node, or one adapter, one ring in
    rank order.
    """
    if spec.p == 1 or spec.count == 0:
        return EMPTY
    nodes = spec.node_ranks()
    channels = min(spec.rails, len(nodes[0]), spec.count) if len(nodes) > 1 else 1
    if channels > 1:
        check_uniform_nodes(spec, NAME)
    orders = [tuple(r for m in nodes for r in m[c + 1 :] + m[: c + 1]) for c in range(channels)]
    parts = [(part, [order]) for part, order in zip(pieces(0, spec.count, channels), orders, strict=True)]
    return Schedule(
        pipelined(spec.rank, parts, spec.itemsize, spec.chunk_bytes),
        info={"channels": channels, "orders": [list(o) for o in orders]},
    )
