"""Rank grids shared by multiring, torus2d and torus2d-3phase: shapes, lines, node layout.

Rank r has coordinates c_k = (r // (d_1 ... d_{k-1})) mod d_k, so dimension
1 runs fastest (consecutive ranks, e.g. the GPUs of one host).
"""

from __future__ import annotations

import math

from scalerepro.comm.context import Context
from scalerepro.comm.shapes import check_grid, squarest
from scalerepro.comm.rings import Ring
from scalerepro.errors import UserError


def line(rank: int, dims: tuple[int, ...], k: int) -> tuple[int, ...]:
    """The ranks that share every coordinate of ``rank`` except dimension k, in order of that coordinate."""
    stride = math.prod(dims[:k])
    ck = (rank // stride) % dims[k]
    return tuple(rank + (i - ck) * stride for i in range(dims[k]))


def rings(ctx: Context, dims: tuple[int, ...], sequence: list[int], reverse: bool = False) -> list[Ring]:
    """This rank's ring along each dimension in ``sequence`` (optionally run backwards)."""
    out = []
    for k in sequence:
        order = line(ctx.rank, dims, k)
        out.append(Ring(ctx.comm, tuple(reversed(order)) if reverse else order))
    return out


def node_layout(ctx: Context) -> tuple[int, int]:
    """(ranks per node, nodes); an error unless every node holds the same number of consecutive ranks."""
    node = ctx.node()
    g = node.size
    leaders = ctx.comm.allgather(node.bcast(ctx.rank, root=0))
    sizes = ctx.comm.allgather(g)
    uniform = len(set(sizes)) == 1 and all(leaders[r] == r - r % g for r in range(ctx.size))
    if not uniform:
        raise UserError(
            f"ranks are not placed {g} consecutive ranks per node (node sizes {sorted(set(sizes))}); "
            "launch with a block layout (e.g. srun --distribution=block) or set comm.grid explicitly"
        )
    return g, ctx.size // g


def grid_for(ctx: Context, algo: str, dims: int | None, default: tuple[int, ...]) -> tuple[int, ...]:
    """comm.grid if set (checked against the rank count and, if given, the dimension count), else ``default``."""
    grid = tuple(ctx.params.grid) or default
    if dims is not None and len(grid) != dims:
        raise UserError(f"{algo}: comm.grid {list(grid)} must have {dims} dimensions, e.g. {list(squarest(ctx.size))}")
    return check_grid(grid, ctx.size, algo)
