"""The one tree builder (comm/trees.py): a tree's stages, its pipeline chunks and the order they keep."""

from __future__ import annotations

import numpy as np
import pytest

from scalerepro.comm import trees
from scalerepro.comm.schedule import UNCUT, Deadlock, Recv, Schedule, Send, Spec, check_aligned, interpret
from scalerepro.comm.trees import FILL, MIN_CHUNK_BYTES, Tree, chunk_count


def chain(p: int) -> Tree:
    """0 <- 1 <- 2 <- ... <- p-1: a tree of height p - 1."""
    return Tree(tuple(r - 1 for r in range(p)))


def test_a_tree_knows_its_children_depths_and_height():
    tree = Tree((-1, 0, 0, 1, 1, 2))
    assert tree.children == ((1, 2), (3, 4), (5,), (), (), ())
    assert tree.depth == (0, 1, 1, 2, 2, 2)
    assert tree.height == 2
    assert tree.inner() == {0, 1, 2}


@pytest.mark.parametrize(("parent", "why"), [((-1, -1, 0), "one root, not 2"), ((-1, 2, 1), "reaches 1 of 3")])
def test_a_parent_list_that_is_no_spanning_tree_is_refused(parent, why):
    with pytest.raises(ValueError, match=why):
        _ = Tree(parent).depth


def test_up_and_down_takes_twice_the_height_in_stages_each_step_where_its_level_is():
    """On the chain 0 <- 1 <- 2: rank 2 sends up in stage 0, rank 1 in stage 1; the total comes back down in
    stages 2 and 3."""
    tree = chain(3)
    lanes = [trees.up_and_down(tree, r, 0, 8) for r in range(3)]
    assert all(len(lane) == 4 for lane in lanes)
    assert lanes[2][0] == (Send(1, 0, 8, True),)
    assert lanes[1][0] == (Recv(2, 0, 8, True),)
    assert lanes[1][1] == (Send(0, 0, 8, True),)
    assert lanes[0][1] == (Recv(1, 0, 8, True),)
    assert lanes[0][2] == (Send(1, 0, 8),)
    assert lanes[2][3] == (Recv(1, 0, 8),)
    check_aligned([Schedule((lane,)) for lane in lanes])


@pytest.mark.parametrize(
    ("nbytes", "chunk", "height", "want"),
    [
        (64 << 20, 4 << 20, 3, 16),  # at most 4 MiB each
        (8 << 20, 4 << 20, 5, FILL * 5),  # at least FILL per level
        (3 * MIN_CHUNK_BYTES, 4 << 20, 5, 3),  # but none under 64 KiB
        (1000, 4 << 20, 5, 1),
        (64 << 20, UNCUT, 5, 1),  # the closed form: no pipeline
    ],
)
def test_chunk_count_is_at_most_chunk_bytes_and_fills_the_pipeline(nbytes, chunk, height, want):
    assert chunk_count(nbytes, chunk, height) == want


def forest_schedules(forest: list[Tree], count: int, chunk: int) -> list[Schedule]:
    p = len(forest[0].parent)
    return [trees.schedule(forest, Spec(p, r, count, chunk_bytes=chunk)) for r in range(p)]


def test_each_trees_chunks_form_one_pipeline():
    """Two trees, each part in 4 chunks: lanes 1-3 follow lanes 0-2, lanes 5-7 follow 4-6, lanes 0 and 4 lead."""
    sched = forest_schedules([chain(4), Tree((1, -1, 1, 2))], 65536, 32 * 1024)[0]
    assert sched.follows == (-1, 0, 1, 2, -1, 4, 5, 6)
    assert sched.lags() == (0, 1, 2, 3, 0, 1, 2, 3)
    assert sched.info["chunks"] == [4, 4]


@pytest.mark.parametrize("lockstep", [False, True])
def test_pipelined_chunks_overlap_the_levels(lockstep):
    """On a chain of 5 (height 4, 8 stages) 6 chunks take 8 + 5 stage rounds, not 6 x 8, and still sum to the same
    bits everywhere on random floats."""
    forest = [chain(5)]
    schedules = forest_schedules(forest, 6 * 4096, 16 * 1024)
    assert len(schedules[0].lanes) == 6
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(6 * 4096).astype(np.float32) for _ in range(5)]
    buffers = [x.copy() for x in inputs]
    rounds = interpret(schedules, buffers, lockstep)
    assert rounds == 8 + 6 - 1
    assert all(b.tobytes() == buffers[0].tobytes() for b in buffers)
    assert np.allclose(buffers[0], np.sum(np.stack(inputs), axis=0), atol=1e-4)


def test_unordered_chunks_cross_every_level_together():
    """The same chunks with the order taken away run all at once: 8 rounds, every chunk on every link at once."""
    ordered = forest_schedules([chain(5)], 6 * 4096, 16 * 1024)
    free = [Schedule(s.lanes, s.groups, s.info) for s in ordered]
    assert interpret(free, [np.zeros(6 * 4096, np.float32) for _ in range(5)]) == 8


def test_a_lane_following_a_later_one_is_refused_and_a_stuck_leader_is_a_deadlock():
    with pytest.raises(ValueError, match="may follow only an earlier one"):
        Schedule(((), ()), follows=(1, -1)).lags()
    stuck = Schedule((((Recv(1, 0, 4),),), ((),)), follows=(-1, 0))
    with pytest.raises(Deadlock):
        interpret([stuck, Schedule(((), ()), follows=(-1, 0))], [np.zeros(4), np.zeros(4)])
