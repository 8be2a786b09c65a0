"""``auto``: per message size and rank count, the algorithm this machine runs fastest, as NCCL's tuner picks one.

With ``comm.tuning`` naming a bench JSON (``scalerepro bench`` on this
machine, same device kind), each algorithm in it is a candidate, and its
time at n bytes on p ranks is predicted from that file: where the file
has rows at p ranks, by interpolating the measured times in log-log
between the nearest sizes (straight in bytes beyond the largest), no
point above a larger size's (a spike: load only adds time), and the
fastest of the rows that ran the same schedule (a row that ran as another
algorithm, ``as: ring``, counts as that one's); at
other rank counts, from the algorithm's alpha-beta-gamma fit and its
schedule's cost terms (:mod:`scalerepro.comm.costterms`). The least
predicted time wins. Without a tuning file a fixed rule applies:
``nccl`` for CUDA buffers (NCCL's own tuner), else ``ring`` on 2 ranks, and
on more ``rabenseifner`` below ``SMALL_BYTES`` (2 lg p latencies instead of
2(p-1)) and ``multicolor-ring`` from there on (on one node of shared memory
the colored rings beat the colored trees, whose few stages pay on a
network; a tuning file decides where both were benched).

Every rank reads the same file and computes the same choice, so all ranks
run the same schedule. The choice is recorded: per bench row
(``schedule.algorithm``) and per gradient bucket in the training event log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scalerepro.comm import benchfile
from scalerepro.comm.algorithms import ALGORITHMS, AUTO, Algorithm
from scalerepro.comm.costfit import Fit, fit, row_spec
from scalerepro.comm.costterms import terms
from scalerepro.comm.schedule import Spec
from scalerepro.errors import UserError

NAME = AUTO
SMALL_BYTES = 256 * 1024


def rule(nbytes: int, p: int, device: str) -> str:
    """The fixed choice without a tuning file."""
    if device == "cuda":
        return "nccl"
    if p <= 2:
        return "ring"
    return "rabenseifner" if nbytes < SMALL_BYTES else "multicolor-ring"


@dataclass(frozen=True)
class Tuner:
    """Measured times per (algorithm, ranks) from a bench JSON, and alpha-beta fits for other rank counts."""

    source: str
    device: str
    curves: dict[tuple[str, int], tuple[tuple[int, float], ...]]  # (algo, ranks) -> ((bytes, seconds), ...)
    fits: dict[str, Fit]
    spec: Spec  # the comm parameters the bench ran with (colors, grid)

    @classmethod
    def load(cls, path: str) -> Tuner:
        """Read ``path`` (a ``scalerepro bench`` JSON); the error names the file and the fix."""
        try:
            record = benchfile.read(path)
        except UserError as exc:
            raise UserError(f"comm.tuning={exc} (on this machine)") from None
        rows = benchfile.flatten(record)
        rows = [r for r in rows if r["algorithm"] in ALGORITHMS and r["time_us"] > 0 and not r.get("wrong")]
        if not rows:
            raise UserError(f"comm.tuning={path}: no benchmarked algorithm to choose from")
        points: dict[tuple[str, int], dict[int, float]] = {}
        for r in rows:  # a row that ran as another algorithm (multicolor-ring on 2 ranks: the ring) is a point of it
            at = points.setdefault((benchfile.ran(r), r["world_size"]), {})
            at[r["bytes"]] = min(at.get(r["bytes"], math.inf), r["time_us"] * 1e-6)  # load on the machine only adds
        gamma = float(record.get("reduction_s_per_byte") or 0.0)
        fits = {
            a: fit(a, rows, gamma)
            for a in sorted({r["algorithm"] for r in rows})
            if sum(1 for r in rows if r["algorithm"] == a and r["world_size"] > 1) >= 2
        }
        return cls(
            path,
            str(record.get("device", "cpu")),
            {k: smooth(sorted(v.items())) for k, v in points.items()},
            fits,
            row_spec(rows[0] | {"bytes": 0}),
        )

    def predict(self, algo: str, nbytes: int, p: int) -> float | None:
        """Predicted seconds of ``algo`` for ``nbytes`` on p ranks (None: nothing to predict from)."""
        curve = self.curves.get((algo, p))
        if curve:
            return interpolate(curve, nbytes)
        f = self.fits.get(algo)
        if f is None:
            return None
        spec = Spec(p, 0, nbytes // self.spec.itemsize, self.spec.itemsize, self.spec.colors, grid=self.spec.grid)
        try:
            return f.seconds(terms(algo, spec))
        except UserError:  # e.g. the file's grid does not fit p ranks: not a candidate here
            return None

    def choose(self, nbytes: int, p: int, device: str) -> str:
        """The candidate with the least predicted time (ties: the first name)."""
        if device != self.device:
            raise UserError(
                f"comm.tuning={self.source} was measured on {self.device} buffers, but this all-reduce "
                f"is on {device}; bench with --device {device} and name that file"
            )
        measured = sorted(a for a, ranks in self.curves if ranks == p)
        algos = measured or sorted({a for a, _ in self.curves} | set(self.fits))  # measured at p ranks, or modelled
        times = {
            a: t
            for a in algos
            if ALGORITHMS[a].device in (None, device) and (t := self.predict(a, nbytes, p)) is not None
        }
        if not times:
            raise UserError(f"comm.tuning={self.source}: no algorithm in it can be predicted at {p} ranks")
        return min(sorted(times), key=times.__getitem__)


def smooth(curve: list[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    """A measured curve with no point above a larger size's: an all-reduce of more bytes takes no less time,
    and load on a shared machine only ever adds time, so a point above a later one is a spike (a scheduler
    tick during its loop) and the later time bounds it."""
    out, low = [], math.inf
    for b, t in reversed(curve):
        low = min(low, t)
        out.append((b, low))
    return tuple(reversed(out))


def interpolate(curve: tuple[tuple[int, float], ...], nbytes: int) -> float:
    """Time at ``nbytes`` from measured (bytes, seconds) points: log-log between neighbours, clamped below,
    proportional to bytes beyond the largest."""
    sizes = [b for b, _ in curve]
    if nbytes <= sizes[0]:
        return curve[0][1]
    if nbytes >= sizes[-1]:
        return curve[-1][1] * nbytes / sizes[-1]
    i = next(k for k, b in enumerate(sizes) if b >= nbytes)
    (b0, t0), (b1, t1) = curve[i - 1], curve[i]
    w = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
    return math.exp(math.log(t0) + w * (math.log(t1) - math.log(t0)))


def choose(ctx: Any, nbytes: int, device: str) -> Algorithm:
    """``auto``'s algorithm for ``nbytes`` on the context's ranks (its tuner is loaded once per context)."""
    return ALGORITHMS[_choice(ctx, nbytes, device)]


def _choice(ctx: Any, nbytes: int, device: str) -> str:
    """The name of :func:`choose`'s algorithm."""
    if ctx.size == 1:
        return "ring" if device == "cpu" else "nccl"
    path = ctx.params.tuning
    if not path:
        return rule(nbytes, ctx.size, device)
    tuner: Tuner = ctx.cached(("auto-tuner", path), lambda: Tuner.load(path))
    return tuner.choose(nbytes, ctx.size, device)
