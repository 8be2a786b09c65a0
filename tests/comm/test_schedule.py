"""Every algorithm's schedule, run for every rank in one process: sums, same bits, no deadlock, at any layout."""

from __future__ import annotations

import re

import numpy as np
import pytest

from scalerepro.comm.algorithms import ALGORITHMS
from scalerepro.comm.schedule import (
    Deadlock,
    Recv,
    Schedule,
    Send,
    Spec,
    bidir_path,
    check_aligned,
    every_rank,
    interpret,
)
from scalerepro.errors import UserError

POINT_TO_POINT = [name for name, a in ALGORITHMS.items() if a.point_to_point]
WITH_COLLECTIVES = [name for name, a in ALGORITHMS.items() if not a.point_to_point]
SCHEDULED = [name for name, a in ALGORITHMS.items() if a.executor is None]  # run by this project's executors
LAYOUTS = {
    1: [()],
    2: [(), (0, 1)],
    3: [()],
    4: [(), (0, 0, 1, 1)],
    5: [()],
    6: [(), (0, 0, 0, 1, 1, 1), (0, 0, 1, 1, 2, 2)],
    7: [()],
    8: [(), (0, 0, 0, 0, 1, 1, 1, 1), (0, 0, 1, 1, 2, 2, 3, 3)],
}
CASES = [
    (algo, p, nodes)
    for algo in POINT_TO_POINT + WITH_COLLECTIVES
    for p, layouts in LAYOUTS.items()
    for nodes in layouts
]


def _run(algo: str, spec: Spec, lockstep: bool = False) -> tuple[list[np.ndarray], list[np.ndarray], list[Schedule]]:
    """(results, inputs, schedules) of ``algo`` on random float32 data, every rank simulated."""
    schedules = every_rank(ALGORITHMS[algo].schedule, spec)
    rng = np.random.default_rng([spec.p, spec.count])
    inputs = [rng.standard_normal(spec.count).astype(np.float32) for _ in range(spec.p)]
    buffers = [x.copy() for x in inputs]
    interpret(schedules, buffers, lockstep)
    return buffers, inputs, schedules


@pytest.mark.parametrize(("algo", "p", "nodes"), CASES)
@pytest.mark.parametrize("count", [0, 1, 7, 1000, 300_007])
def test_schedule_sums_to_the_same_bits_everywhere(algo, p, nodes, count):
    spec = Spec(p, 0, count, colors=4, chunk_bytes=64 * 1024, nodes=nodes)
    try:
        got, inputs, schedules = _run(algo, spec)
    except UserError as exc:  # a grid the ranks cannot form: it must say what would fit
        message = str(exc)
    else:
        message = ""
    if message:
        assert "comm.grid" in message or "ranks are not placed" in message
        return
    want = np.sum(np.stack([x.astype(np.float64) for x in inputs]), axis=0) if count else np.zeros(0)
    bound = max(p - 1, 1) * np.finfo(np.float32).eps * np.sum(np.abs(np.stack(inputs)), axis=0) if count else 0
    for r, buf in enumerate(got):
        assert np.all(np.abs(buf - want) <= bound), f"rank {r}"
        assert buf.tobytes() == got[0].tobytes(), f"rank {r} differs from rank 0"
    if algo in POINT_TO_POINT:
        check_aligned(schedules)


@pytest.mark.parametrize("algo", SCHEDULED)
def test_lanes_in_lockstep_finish_too(algo):
    """The torch executor serves lanes round by round; no schedule may need one lane to run ahead."""
    spec = Spec(6, 0, 100_003, colors=3, chunk_bytes=32 * 1024, nodes=(0, 0, 0, 1, 1, 1))
    got, inputs, _ = _run(algo, spec, lockstep=True)
    assert np.allclose(got[0], np.sum(np.stack(inputs), axis=0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    ("algo", "p", "nodes", "recorded"),
    [
        ("multicolor-ring", 2, (), "ring"),
        ("torus2d", 7, (), "multicolor-ring"),
        ("torus2d-3phase", 5, (), "ring"),
        ("torus2d-4link", 7, (), "multicolor-ring"),
        ("multiring", 5, (), "ring"),
        ("hierarchical", 4, (), "ring"),
    ],
)
def test_an_algorithm_that_reduces_to_another_says_so(algo, p, nodes, recorded):
    schedule = ALGORITHMS[algo].schedule(Spec(p, 0, 1 << 20, nodes=nodes))
    assert schedule.info["as"] == recorded


@pytest.mark.parametrize(("algo", "links"), [("torus2d", 2), ("torus2d-4link", 4)])
def test_torus_first_stage_busies_this_many_of_a_ranks_four_outgoing_links(algo, links):
    """On a 4 x 4 torus: torus2d sends to 2 of a rank's 4 neighbours in its first stage, torus2d-4link to all 4."""
    spec = Spec(16, 5, 1 << 20, grid=(4, 4))
    first = [lane[0] for lane in ALGORITHMS[algo].schedule(spec).lanes]
    peers = {step.peer for stage in first for step in stage if isinstance(step, Send)}
    assert len(peers) == links
    assert peers <= {4, 6, 1, 9}  # rank 5 is (1, 1): its neighbours along x, then along y


@pytest.mark.parametrize("q", range(1, 10))
def test_a_ring_run_both_ways_sums_in_half_the_stages(q):
    """bidir_path on one ring of q: the same bits everywhere on random floats, ceil(q/2) stages each way, and
    (q > 3) its first stage sends to both neighbours."""
    order = tuple(range(q))
    schedules = [Schedule((tuple(bidir_path(r, [order], 0, 1001)),)) for r in range(q)]
    rng = np.random.default_rng(q)
    inputs = [rng.standard_normal(1001).astype(np.float32) for _ in range(q)]
    buffers = [x.copy() for x in inputs]
    interpret(schedules, buffers)
    want = np.sum(np.stack([x.astype(np.float64) for x in inputs]), axis=0)
    bound = max(q - 1, 1) * np.finfo(np.float32).eps * np.sum(np.abs(np.stack(inputs)), axis=0)
    for buf in buffers:
        assert np.all(np.abs(buf - want) <= bound)
        assert np.array_equal(buf, buffers[0])
    stages = schedules[0].lanes[0]
    assert len(stages) == (2 * ((q + 1) // 2) if q > 1 else 0)
    if q > 3:
        assert {s.peer for s in stages[0] if isinstance(s, Send)} == {1, q - 1}


def test_torus2d_4link_takes_about_half_torus2ds_stages_and_link_bytes():
    spec = Spec(64, 9, 1 << 16, grid=(8, 8), chunk_bytes=1 << 62)
    plain, four = (ALGORITHMS[a].schedule(spec) for a in ("torus2d", "torus2d-4link"))
    assert max(map(len, four.lanes)) * 2 <= max(map(len, plain.lanes)) + 4  # 2 x (4 + 4) against 2 x (7 + 7)

    def most_on_a_link(sched: Schedule) -> int:
        sent: dict[int, int] = {}
        for step in sched.steps():
            if isinstance(step, Send):
                sent[step.peer] = sent.get(step.peer, 0) + step.hi - step.lo
        return max(sent.values())

    assert most_on_a_link(four) <= 0.65 * most_on_a_link(plain)  # 4 of 8 chunks a ring against 7 of 8


def test_schedules_record_their_shape():
    spec = Spec(8, 3, 1 << 20, colors=2, nodes=(0, 0, 0, 0, 1, 1, 1, 1))
    assert ALGORITHMS["torus2d"].schedule(spec).info["grid"] == [4, 2]  # X = ranks per node
    info = ALGORITHMS["multicolor-ring"].schedule(spec).info
    assert info["colors"] == 2
    assert info["orders"][1] == list(reversed(info["orders"][0]))
    info = ALGORITHMS["multicolor"].schedule(spec).info
    assert (info["colors"], info["arity"], info["roots"]) == (2, 2, [0, 5])  # color 1 enters its root node at rank 1
    assert ALGORITHMS["multiring"].schedule(spec).info["grid"] == [4, 2]


def test_ring_has_two_p_minus_one_dependent_steps():
    schedule = ALGORITHMS["ring"].schedule(Spec(5, 2, 1000))
    assert len(schedule.lanes) == 1
    assert len(schedule.lanes[0]) == 2 * (5 - 1)


def test_simulate_names_a_deadlock_instead_of_hanging():
    waits = Schedule((((Recv(1, 0, 4),),),))
    also_waits = Schedule((((Recv(0, 0, 4),),),))
    with pytest.raises(Deadlock, match="ranks \\[0, 1\\] wait"):
        interpret([waits, also_waits], [np.zeros(4), np.zeros(4)])


def test_simulate_refuses_messages_whose_ends_disagree():
    sends = Schedule((((Send(1, 0, 4, True),),),))
    receives = Schedule((((Recv(0, 0, 3, True),),),))
    with pytest.raises(ValueError, match="sends"):
        interpret([sends, receives], [np.zeros(4), np.zeros(4)])


GRIDS_3D = [((2, 2, 2), ()), ((2, 3, 2), ("ring", "ring", "ring")), ((4, 2, 2), ("library", "ring", "ring"))]
GRIDS_3D += [((2, 4), ("ring", "library")), ((2, 2, 3), ("ring", "library", "ring")), ((3, 1, 2), ("ring", "ring"))]


@pytest.mark.parametrize(("grid", "kinds"), GRIDS_3D)
@pytest.mark.parametrize("count", [1, 1000, 100_003])
def test_multiring_sums_on_ddl_grids_with_an_algorithm_per_dimension(grid, kinds, count):
    spec = Spec(int(np.prod(grid)), 0, count, chunk_bytes=64 * 1024, grid=grid, dim_algorithms=kinds)
    for lockstep in (False, True):
        got, inputs, schedules = _run("multiring", spec, lockstep)
        want = np.sum(np.stack([x.astype(np.float64) for x in inputs]), axis=0)
        bound = spec.p * np.finfo(np.float32).eps * np.sum(np.abs(np.stack(inputs)), axis=0)
        assert all(np.all(np.abs(buf - want) <= bound) for buf in got)
        assert all(buf.tobytes() == got[0].tobytes() for buf in got)
    check_aligned(schedules)
    assert schedules[0].info["grid"] == list(grid)
    if "library" in kinds:
        assert len(schedules[0].lanes) == 1  # collectives only in one-lane schedules


@pytest.mark.parametrize("grid", [(2, 2), (2, 3), (3, 2), (4, 2), (2, 4), (4, 4), (3, 5)])
def test_multiring_of_rings_on_a_2d_grid_is_exactly_torus2d_3phase(grid):
    """DDL's grid of rings on X x Y and Mikami et al.'s 3-phase torus all-reduce are one schedule (see the docs)."""
    spec = Spec(grid[0] * grid[1], 0, 100_003, chunk_bytes=64 * 1024, grid=grid)
    for rank in range(spec.p):
        mine = ALGORITHMS["multiring"].schedule(Spec(**{**spec.__dict__, "rank": rank}))
        theirs = ALGORITHMS["torus2d-3phase"].schedule(Spec(**{**spec.__dict__, "rank": rank}))
        assert mine.lanes == theirs.lanes


def test_multiring_with_the_library_across_nodes_is_hierarchical():
    """Ranks per node x nodes, a ring inside the node and the library across, unpipelined: hierarchical's stages."""
    nodes = tuple(r // 4 for r in range(12))
    for rank in range(12):
        mine = ALGORITHMS["multiring"].schedule(Spec(12, rank, 10_001, nodes=nodes, dim_algorithms=("ring", "library")))
        theirs = ALGORITHMS["hierarchical"].schedule(Spec(12, rank, 10_001, nodes=nodes))
        assert mine.lanes == theirs.lanes
        assert mine.groups == theirs.groups


@pytest.mark.parametrize(
    ("grid", "kinds", "named"),
    [
        ((2, 2, 2, 2), (), "at most 3"),
        ((2, 2), ("ring", "ring", "ring"), "names 3 dimensions but the grid [2, 2] has 2"),
        ((2, 2), ("tree",), "'tree' is not one of ring, library"),
    ],
)
def test_multiring_refuses_a_grid_ddl_does_not_describe(grid, kinds, named):
    with pytest.raises(UserError, match=re.escape(named)):
        ALGORITHMS["multiring"].schedule(Spec(int(np.prod(grid)), 0, 1000, grid=grid, dim_algorithms=kinds))


@pytest.mark.parametrize(("p", "dims"), [(24, (4, 6)), (60, (3, 4, 5)), (4096, (8, 512))])
def test_multiring_library_lines_are_the_partition_along_each_dimension(p, dims):
    """The groups a library dimension's collective runs over: every rank in exactly one line, each line the ranks
    that differ only in that coordinate, in order of their first rank."""
    from scalerepro.comm.multiring import lines
    from scalerepro.comm.shapes import line

    for k in range(len(dims)):
        found = lines(p, dims, k)
        assert found == tuple(sorted({line(r, dims, k) for r in range(p)}))
        assert sorted(r for g in found for r in g) == list(range(p))
