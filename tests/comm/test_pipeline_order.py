"""Both executors keep a schedule's pipeline order (``Schedule.follows``): a lane posts its stage k only after the
lane it follows has finished its stage k."""

from __future__ import annotations

from typing import Any

import numpy as np

from scalerepro.comm import torch_executor
from scalerepro.comm.schedule import Recv, Schedule, Send

# two lanes of three stages each, every stage a message from this rank to itself; lane 1 follows lane 0
LANE0 = tuple((Send(0, 0, 4), Recv(0, 4, 8)) for _ in range(3))
LANE1 = tuple((Send(0, 8, 12), Recv(0, 12, 16)) for _ in range(3))
PIPELINE = Schedule((LANE0, LANE1), follows=(-1, 0))


class Recording:
    """A communicator that logs which lane (by tag) each posted send belongs to, and passes the call on."""

    def __init__(self, comm: Any) -> None:
        self.comm, self.posted = comm, []

    def Isend(self, buf: Any, dest: int, tag: int) -> Any:
        self.posted.append(tag)
        return self.comm.Isend(buf, dest=dest, tag=tag)

    def Irecv(self, buf: Any, source: int, tag: int) -> Any:
        return self.comm.Irecv(buf, source=source, tag=tag)


def test_the_mpi_executor_posts_a_followers_stage_after_its_leaders():
    """Without the order lane 1's first stage would go out beside lane 0's; with it, lane 0 posts stage k + 1 as
    it finishes stage k, before lane 1 may post stage k: the sends alternate 0, 0, 1, 0, 1, 1."""
    from mpi4py import MPI

    from scalerepro.comm import mpi_executor

    plan = mpi_executor.compile_plan(PIPELINE, 16, 8)
    comm = Recording(MPI.COMM_SELF)
    buf = np.arange(16, dtype=np.float64)
    mpi_executor._drive(plan, buf, np.empty(plan.scratch), comm)  # type: ignore[arg-type]
    lanes = [tag - mpi_executor.TAG for tag in comm.posted]
    assert lanes == [0, 0, 1, 0, 1, 1]
    unordered = mpi_executor.compile_plan(Schedule((LANE0, LANE1)), 16, 8)
    comm = Recording(MPI.COMM_SELF)
    mpi_executor._drive(unordered, buf, np.empty(unordered.scratch), comm)  # type: ignore[arg-type]
    assert [tag - mpi_executor.TAG for tag in comm.posted][:2] == [0, 1]


def test_the_torch_executor_runs_a_follower_a_round_behind(monkeypatch):
    """In rounds: lane 0 posts stages 0, 1, 2 in rounds 0, 1, 2; lane 1, a round behind, in rounds 1, 2, 3."""
    plan = torch_executor.compile_plan(PIPELINE, 0, (0,))
    assert plan.lags == (0, 1)
    index = {id(stage): (lane, k) for lane, stages in enumerate(plan.lanes) for k, stage in enumerate(stages)}
    posted: list[tuple[int, int]] = []
    monkeypatch.setattr(torch_executor, "_post", lambda stage, *_: posted.append(index[id(stage)]) or [])
    monkeypatch.setattr(torch_executor, "_finish", lambda *_: None)
    torch_executor.allreduce_tensor(plan, None, None, None)  # type: ignore[arg-type]
    assert posted == [(0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (1, 2)]
