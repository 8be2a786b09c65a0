"""The step as a timeline: ResNet-50's FLOPs counted by torch, buckets cut as training cuts them, overlap as output."""

from __future__ import annotations

import pytest
import torchvision

from scalerepro.comm.fusion import cut
from scalerepro.sim.timeline import Bucket, Model, buckets, optimizer_seconds, resnet50, step


def test_resnet50_is_counted_from_torchvision_not_entered_by_hand():
    model = resnet50()
    expected = sum(p.numel() for p in torchvision.models.resnet50().parameters())
    assert model.parameters == expected
    assert 7.5e9 < model.forward_flops < 8.5e9  # 2 x 4.09 G multiply-adds at 224 x 224
    assert 1.8 < model.backward_flops / model.forward_flops < 2.1  # gradients of inputs and of weights
    assert model.numels[:2] == (1000, 2048 * 1000)  # reversed parameters: the classifier's bias, then weight
    assert model.ready[0] == model.ready[1] < model.ready[-1]  # the classifier's gradients are ready first


@pytest.mark.parametrize(("itemsize", "mib"), [(4, 25.0), (2, 25.0), (4, 1.0), (4, 1000.0)])
def test_buckets_cover_every_gradient_once_in_backward_order(itemsize, mib):
    model = resnet50()
    found = buckets(model, itemsize, mib)
    assert sum(b.nbytes for b in found) == model.parameters * itemsize
    assert [b.ready for b in found] == sorted(b.ready for b in found)  # buckets readied in order
    assert found[-1].ready == pytest.approx(1.0)
    assert len(found) == len(cut([n * itemsize for n in model.numels], int(mib * 2**20)))


def test_cut_packs_whole_gradients_and_gives_a_large_one_its_own_bucket():
    assert cut([3, 3, 3, 10, 1], 6) == [[0, 1], [2], [3], [4]]
    assert cut([], 6) == []


TOY = Model(forward_flops=1.0, backward_flops=2.0, numels=(1, 1), ready=(1.0, 2.0))
TWO = [Bucket(4, 0.5), Bucket(4, 1.0)]


def test_without_overlap_every_all_reduce_waits_for_the_backward_pass():
    s = step(TOY, TWO, [0.1, 0.2], compute_s=3.0, optimizer_s=0.05, overlap="none")
    assert s.step_s == pytest.approx(3.0 + 0.3 + 0.05)
    assert s.hidden == pytest.approx(0.0)


def test_with_bucket_overlap_the_first_bucket_hides_behind_the_rest_of_the_backward_pass():
    # forward 1 s, backward 2 s: bucket 0 ready at 2 s, summed by 2.1; bucket 1 ready at 3 s, done at 3.2
    s = step(TOY, TWO, [0.1, 0.2], compute_s=3.0, optimizer_s=0.0, overlap="buckets")
    assert s.step_s == pytest.approx(3.2)
    assert s.exposed_s == pytest.approx(0.2)
    assert s.hidden == pytest.approx(1 / 3)


def test_a_slow_first_bucket_delays_the_next_one():
    s = step(TOY, TWO, [1.5, 0.2], compute_s=3.0, optimizer_s=0.0, overlap="buckets")
    assert s.step_s == pytest.approx(2.0 + 1.5 + 0.2)  # bucket 1 waits for bucket 0's all-reduce


def test_an_unknown_overlap_mode_is_named():
    with pytest.raises(Exception, match="overlap 'half'"):
        step(TOY, TWO, [0.1, 0.2], 3.0, 0.0, "half")


def test_the_optimizer_moves_twenty_bytes_per_weight_at_the_memory_bandwidth():
    assert optimizer_seconds(1_000_000, 3 / 1e9) == pytest.approx(20e6 / 1e9)
