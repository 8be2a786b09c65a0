"""``multicolor``: colored k-ary trees laid onto the nodes; its sums are checked with every algorithm
(test_schedule, test_allreduce) and its simulated bandwidth in tests/sim."""

from __future__ import annotations

import pytest

from scalerepro.comm import costterms, multicolor
from scalerepro.comm.multicolor import MIN_COLOR_BYTES, colored, colors_for, units
from scalerepro.comm.schedule import Spec


def blocks(p: int, g: int) -> tuple[int, ...]:
    """Node of every rank: g consecutive ranks per node."""
    return tuple(r // g for r in range(p))


def forest(p: int, colors: int, arity: int, g: int = 0) -> tuple:
    return colored(units(Spec(p, 0, 1, nodes=blocks(p, g) if g else ())), colors, arity)


@pytest.mark.parametrize("p", range(2, 41))
@pytest.mark.parametrize(("colors", "arity"), [(2, 2), (3, 3), (4, 4), (1, 2), (3, 2)])
def test_every_color_is_a_tree_of_every_rank_with_at_most_arity_children(p, colors, arity):
    for tree in forest(p, colors, arity):
        assert len(tree.depth) == p  # depth raises unless the parents span every rank from one root
        assert max(len(kids) for kids in tree.children) <= arity
        assert tree.height == heap_height(p, arity)


def heap_height(p: int, arity: int) -> int:
    """The height of a complete heap of p nodes with ``arity`` children each: its last full level and one more."""
    height, width, held = 0, 1, 1
    while held < p:
        height, width = height + 1, width * arity
        held += width
    return height


@pytest.mark.parametrize("p", range(2, 41))
@pytest.mark.parametrize("k", [2, 3, 4])
def test_a_rank_is_an_inner_node_of_at_most_one_color_where_colors_times_inner_fit(p, k):
    """k colors of k-ary trees: disjoint inner ranks whenever k x ceil((p-1)/k) <= p (always for two binary
    trees, the two-tree algorithm's property)."""
    inner = [t.inner() for t in forest(p, k, k)]
    if k * -(-(p - 1) // k) <= p:
        assert sum(len(s) for s in inner) == len(set().union(*inner)), inner
    assert max(sum(r in s for s in inner) for r in range(p)) <= 2


@pytest.mark.parametrize(("p", "g"), [(8, 4), (16, 4), (24, 4), (12, 3), (256, 4), (64, 8)])
def test_on_nodes_a_color_crosses_the_network_only_through_its_own_rank_of_each_node(p, g):
    """Color c enters and leaves every node through the node's (c mod g)-th rank, so two colors use two ranks'
    ports and adapters; inside a node it is a chain; nodes are inner in at most one color."""
    trees = forest(p, 2, 2, g)
    for c, tree in enumerate(trees):
        crossing = {(r, up) for r, up in enumerate(tree.parent) if up >= 0 and r // g != up // g}
        assert {r % g for edge in crossing for r in edge} == {c % g}
        inside = [r for r, up in enumerate(tree.parent) if up >= 0 and r // g == up // g]
        assert all(len([k for k in tree.children[r] if k // g == r // g]) <= 1 for r in range(p))
        assert len(inside) == p - p // g
    nodes_inner = [{r // g for r in t.inner() if any(k // g != r // g for k in t.children[r])} for t in trees]
    assert not nodes_inner[0] & nodes_inner[1]


def test_at_kumars_scale_the_trees_take_a_few_dozen_stages_not_the_rings_510():
    """256 ranks on 64 nodes of 4: node heap of height 6, a chain of 3 inside: 18 stages against 2 x 255."""
    spec = Spec(256, 0, 1 << 20, nodes=blocks(256, 4), chunk_bytes=1 << 62)
    a, _, _ = costterms.terms("multicolor", spec)
    assert a == 2 * (6 + 3) == 18
    assert costterms.terms("ring", spec)[0] == 510


def test_small_buffers_use_fewer_colors_and_the_schedule_records_its_shape():
    assert colors_for(MIN_COLOR_BYTES - 1, 4) == 1
    assert colors_for(3 * MIN_COLOR_BYTES, 4) == 3
    info = multicolor.schedule(Spec(8, 3, 1 << 20, colors=3, tree_arity=3, chunk_bytes=1 << 20)).info
    assert info["colors"] == 3
    assert info["arity"] == 3
    assert info["height"] == 2  # 8 ranks in a ternary heap: 1 + 3 + 4
    assert len(info["roots"]) == 3 == len(set(info["roots"]))
    assert len(info["chunks"]) == 3


def test_one_rank_and_no_data_need_no_schedule():
    assert multicolor.schedule(Spec(1, 0, 100)).lanes == ()
    assert multicolor.schedule(Spec(4, 0, 0)).lanes == ()
