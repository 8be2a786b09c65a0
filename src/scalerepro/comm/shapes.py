"""Rank-grid shapes, pure arithmetic (no MPI): factorizations, the squarest 2-D shape, lines, fit checks.

Rank r has coordinates c_k = (r // (d_1 ... d_{k-1})) mod d_k, so dimension
1 runs fastest (consecutive ranks, e.g. the GPUs of one host).
"""

from __future__ import annotations

import math

from scalerepro.errors import UserError


def factorizations(p: int, dims: int) -> list[tuple[int, ...]]:
    """Every ordered way to write p as a product of ``dims`` factors >= 1."""
    if dims == 1:
        return [(p,)]
    return [(d, *rest) for d in range(1, p + 1) if p % d == 0 for rest in factorizations(p // d, dims - 1)]


def check_grid(grid: tuple[int, ...], p: int, algo: str) -> tuple[int, ...]:
    """``grid`` if its product is p; otherwise a UserError listing the shapes that fit."""
    if math.prod(grid) == p:
        return grid
    fits = [list(f) for f in factorizations(p, len(grid)) if all(d > 1 for d in f) or p == 1] or [
        list(f) for f in factorizations(p, len(grid))
    ]
    raise UserError(
        f"{algo}: grid {list(grid)} has {math.prod(grid)} ranks but the job has {p}; "
        f"set comm.grid to one of {fits[:12]}"
    )


def line(rank: int, dims: tuple[int, ...], k: int) -> tuple[int, ...]:
    """The ranks that share every coordinate of ``rank`` except dimension k, in order of that coordinate."""
    stride = math.prod(dims[:k])
    ck = (rank // stride) % dims[k]
    return tuple(rank + (i - ck) * stride for i in range(dims[k]))


def resolve_grid(
    grid: tuple[int, ...], p: int, algo: str, dims: int | None, default: tuple[int, ...]
) -> tuple[int, ...]:
    """``grid`` if set (checked against p and, if given, the dimension count), else ``default``."""
    chosen = tuple(grid) or default
    if dims is not None and len(chosen) != dims:
        raise UserError(f"{algo}: comm.grid {list(chosen)} must have {dims} dimensions, e.g. {list(squarest(p))}")
    return check_grid(chosen, p, algo)


def squarest(p: int) -> tuple[int, int]:
    """The 2-D shape X x Y = p with X >= Y closest to square."""
    x, y = max((f for f in factorizations(p, 2) if f[0] >= f[1]), key=lambda f: f[1])
    return x, y
