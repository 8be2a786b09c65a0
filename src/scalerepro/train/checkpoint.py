"""Checkpoints written atomically, resumed from, and preemption signals turned into a clean stop.

A checkpoint holds rank 0's parameters and optimizer state (identical on
every rank), every rank's batch-norm buffers (running statistics differ
between ranks unless batch norm is global), and where the run is: the
next batch of the current epoch, the global step, the elapsed seconds
and the evaluations so far. Augmentation is a function of (seed, epoch,
sample), so resuming at a batch boundary replays exactly the batches an
uninterrupted run would have seen.
"""

from __future__ import annotations

import io
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from mpi4py import MPI
from torch import nn

from scalerepro.errors import UserError
from scalerepro.io import write_bytes_atomic
from scalerepro.mpi import node_comm


@dataclass
class Progress:
    """Where a run is: the next (epoch, batch), the global step, elapsed seconds, evaluations, target reached."""

    epoch: int = 0
    batch: int = 0
    step: int = 0
    elapsed_s: float = 0.0
    evals: list[dict[str, Any]] = field(default_factory=list)
    reached: dict[str, Any] | None = None


def _buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    """This rank's buffers (batch-norm running statistics), on the CPU."""
    return {name: t.detach().cpu() for name, t in model.named_buffers()}


def save(
    path: Path,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    progress: Progress,
    meta: dict[str, Any],
    comm: MPI.Intracomm,
) -> None:
    """Collective: gather every rank's buffers; rank 0 writes the checkpoint atomically."""
    buffers = comm.gather(_buffers(model), root=0)
    if comm.rank != 0:
        return
    state = {
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "optimizer": opt.state_dict(),
        "buffers_per_rank": buffers,
        "progress": asdict(progress),
        "meta": meta,
    }
    blob = io.BytesIO()
    torch.save(state, blob)
    write_bytes_atomic(path, blob.getvalue())


def restore_progress(
    path: Path, model: nn.Module, opt: torch.optim.Optimizer, meta: dict[str, Any], comm: MPI.Intracomm
) -> Progress | None:
    """Collective: restore from ``path`` if it exists; None when there is none.

    One rank per node reads the file and hands its node's ranks what they need: the shared parameters,
    optimizer state and progress, and each rank its own batch-norm buffers (256 ranks reading every
    rank's buffers from a shared filesystem would read the whole file 256 times). A checkpoint from a
    run with other settings is refused with the fix.
    """
    if not path.exists():
        return None
    node = node_comm(comm)
    try:
        state = _read_on_leader(path, node)
        buffers = state.pop("buffers_per_rank", None)
        state = node.bcast(state, root=0)
        _check_meta(path, state["meta"], meta)  # before the buffers: another rank count has another number of them
        if not node.bcast(buffers is None or len(buffers) == comm.size, root=0):  # one per rank, or damaged
            raise UserError(_unreadable(path), shared=True)
        ranks = node.gather(comm.rank, root=0)  # the node's world ranks, in node order
        ours = node.scatter(None if ranks is None else [buffers[r] for r in ranks], root=0)  # a list on the leader
    finally:
        node.Free()
    try:
        model.load_state_dict(state["model"])
        for name, t in model.named_buffers():
            t.copy_(ours[name])
        opt.load_state_dict(state["optimizer"])
        return Progress(**state["progress"])
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError):  # the same on every rank: same file, same code
        raise UserError(_unreadable(path), shared=True) from None


def _unreadable(path: Path) -> str:
    """The one message for a checkpoint that cannot be used, whatever is wrong inside it."""
    return (
        f"checkpoint {path} cannot be read (damaged, or not a checkpoint scalerepro wrote); delete it to start the "
        "run over, or put back a good copy to resume"
    )


def _check_meta(path: Path, theirs_meta: Any, meta: dict[str, Any]) -> None:
    """A UserError naming every setting that differs unless the checkpoint was written with ``meta``."""
    if theirs_meta != meta:
        mine, theirs = _flat(meta), _flat(theirs_meta)
        diff = [
            f"{k}: {theirs.get(k)!r} there, {mine.get(k)!r} now"
            for k in sorted(set(mine) | set(theirs))
            if mine.get(k) != theirs.get(k)
        ]
        raise UserError(
            f"checkpoint {path} was written by a run with other settings ({'; '.join(diff)}); "
            f"use another --out, or delete the checkpoint to start over",
            shared=True,  # every rank compares the same broadcast state
        )


def _read_on_leader(path: Path, node: MPI.Intracomm) -> dict[str, Any]:
    """The checkpoint's contents on the node's first rank ({} elsewhere), its parts checked as far as their
    shape; a file that cannot be read or is not shaped so raises the same UserError on every rank."""
    state: dict[str, Any] = {}
    ok = True
    if node.rank == 0:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            ok = _shaped(state)
        except Exception:  # any corruption: torch's message (and its advice) would differ from case to case
            ok = False
    if not node.bcast(ok, root=0):
        raise UserError(_unreadable(path), shared=True)
    return state


def _shaped(state: Any) -> bool:
    """Whether ``state`` has the parts :func:`save` writes, each of its type."""
    parts = {"model": dict, "optimizer": dict, "buffers_per_rank": list, "progress": dict, "meta": dict}
    return isinstance(state, dict) and all(isinstance(state.get(k), t) for k, t in parts.items())


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dict as dotted keys."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


class Preempted(Exception):
    """The run stopped on a signal after writing a checkpoint."""

    def __init__(self, signum: int) -> None:
        """``signum``: the signal that stopped it."""
        super().__init__(
            f"stopped by {signal.Signals(signum).name}; checkpoint written, rerun with the same --out to resume"
        )
        self.signum = signum
