"""``dbtree``: NCCL's double binary tree; its sums and alignment are checked with every algorithm (test_schedule)."""

from __future__ import annotations

import math

import pytest

from scalerepro.comm import costterms, dbtree
from scalerepro.comm.schedule import Spec


@pytest.mark.parametrize("p", range(1, 70))
def test_both_trees_span_every_rank_once_from_one_root(p):
    for which in (0, 1):
        links = {r: dbtree.tree(p, r, which) for r in range(p)}
        root = 0 if which == 0 or p == 1 else (1 if p % 2 else p - 1)  # NCCL's ncclGetDtreeRoots
        assert [r for r, (parent, _) in links.items() if parent is None] == [root]
        for r, (parent, children) in links.items():
            assert len(children) <= 2
            assert all(links[c][0] == r for c in children), (which, r)
            assert parent is None or r in links[parent][1], (which, r)
        height = dbtree.pair(p)[which].height
        assert height <= math.ceil(math.log2(p)) if p > 1 else height == 0


@pytest.mark.parametrize("p", range(3, 70))
def test_no_rank_is_a_leaf_of_both_trees(p):
    """What makes the pair worth two trees: a rank's children in one tree are the load it was spared in the
    other. NCCL's mirror (even p) and shift (odd p) give it; a rank may be inside both where p is odd."""
    leaf_in_both = [r for r in range(p) if not dbtree.tree(p, r, 0)[1] and not dbtree.tree(p, r, 1)[1]]
    assert leaf_in_both == []


def test_the_trees_of_14_ranks_are_nccls_drawing():
    """The first tree of 14 ranks as NCCL's trees.cc draws it: 0 over 8, 8 over 4 and 12, 4 over 2 and 6, ..."""
    children = {r: dbtree.tree(14, r, 0)[1] for r in range(14)}
    assert children[0] == (8,)
    assert children[8] == (4, 12)
    assert children[12] == (10, 13)
    assert children[2] == (1, 3)
    assert dbtree.tree(14, 13, 0)[0] == 12


@pytest.mark.parametrize(("p", "nodes"), [(8, ()), (16, tuple(r // 4 for r in range(16))), (1024, ())])
def test_its_latency_is_twice_the_trees_height(p, nodes):
    """2 lg p stages up and down (the halves' trees run at once), against the ring's 2(p-1)."""
    spec = Spec(p, 0, 1 << 20, nodes=nodes)
    a, _, _ = costterms.terms("dbtree", spec)
    assert a == 2 * max(t.height for t in dbtree.pair(p)) == 2 * math.ceil(math.log2(p))
    assert a < costterms.terms("ring", spec)[0] or p <= 2


def test_it_records_its_two_trees_and_pipelines_their_chunks():
    sched = dbtree.schedule(Spec(4, 0, 1 << 20, chunk_bytes=1 << 20))
    assert sched.info["trees"] == 2
    assert sched.info["chunks"] == [8, 8]  # 2 MiB a tree: 1 MiB chunks would be 2, but a height of 2 wants 8
    assert sched.follows == (-1, *range(7), -1, *range(8, 15))
    assert dbtree.schedule(Spec(1, 0, 100)).lanes == ()
