"""Loader: per-node partition, exactly-once epochs and evals, determinism, fused decode, worker batches."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from PIL import Image

from scalerepro.data.augment import (
    EvalPipeline,
    TrainPipeline,
    centre_box,
    crop_resize,
    dct_factor,
    random_resized_box,
)
from scalerepro.data.loader import (
    BatchPool,
    Outputs,
    ShardDataset,
    batches,
    epoch_indices,
    eval_indices,
)
from scalerepro.data.shards import node_shards
from scalerepro.data.tensors import MEAN, STD
from scalerepro.errors import UserError
from scalerepro.mpi import Layout


def layouts(ranks_per_node: tuple[int, ...]) -> list[Layout]:
    """Every rank's Layout for the given ranks per node."""
    return [Layout(n, r, ranks_per_node) for n, size in enumerate(ranks_per_node) for r in range(size)]


@pytest.mark.parametrize("ranks_per_node", [(1,), (2,), (3,), (2, 2), (3, 3, 3)])
def test_epoch_gives_each_sample_at_most_once_and_all_ranks_equal_steps(ranks_per_node):
    counts = np.array([40, 39, 41, 40, 39, 40, 41, 40, 39, 41, 40, 40])  # as shard.assign cuts: near-equal
    parts = [epoch_indices(counts, at, seed=3, epoch=1) for at in layouts(ranks_per_node)]
    flat = np.concatenate(parts)
    assert len(set(flat.tolist())) == len(flat)  # disjoint over ranks
    assert len({len(p) for p in parts}) == 1  # same number of samples, hence steps, per rank
    nodes = len(ranks_per_node)
    per_node = [counts[node_shards(12, j, nodes)].sum() for j in range(nodes)]
    assert counts.sum() - len(flat) < sum(ranks_per_node) + max(per_node) - min(per_node)  # only a remainder
    starts = np.concatenate([[0], np.cumsum(counts)])
    for at, part in zip(layouts(ranks_per_node), parts, strict=True):  # a rank reads only its node's shards
        shard = np.searchsorted(starts, part, side="right") - 1
        assert set(shard.tolist()) <= set(node_shards(len(counts), at.node, at.nodes))


def test_shards_that_do_not_divide_over_the_nodes_name_the_key():
    with pytest.raises(UserError, match=r"set shard\.train_shards to a multiple of the node count"):
        epoch_indices(np.full(9, 40), Layout(0, 0, (2, 2)), 0, 0)


def test_single_rank_epoch_is_a_permutation_of_everything():
    counts = np.array([5, 7, 6])
    assert sorted(epoch_indices(counts, Layout(), 0, 0).tolist()) == list(range(18))


def test_shuffle_is_a_function_of_seed_and_epoch():
    counts = np.array([50, 50, 50])
    at = Layout(0, 1, (3,))
    assert np.array_equal(epoch_indices(counts, at, 7, 2), epoch_indices(counts, at, 7, 2))
    assert not np.array_equal(epoch_indices(counts, at, 7, 2), epoch_indices(counts, at, 7, 3))
    assert not np.array_equal(epoch_indices(counts, at, 7, 2), epoch_indices(counts, at, 8, 2))


@pytest.mark.parametrize("ranks_per_node", [(1,), (3,), (2, 2)])
def test_eval_gives_every_sample_exactly_once(ranks_per_node):
    counts = np.array([11, 10, 12, 9])
    starts = np.concatenate([[0], np.cumsum(counts)])
    seen = []
    for at in layouts(ranks_per_node):
        local = np.concatenate([np.arange(starts[k], starts[k + 1]) for k in node_shards(4, at.node, at.nodes)])
        seen += eval_indices(local, at).tolist()
    assert sorted(seen) == list(range(42))


def test_more_nodes_than_shards_names_the_keys():
    with pytest.raises(UserError, match=r"shard\.train_shards"):
        node_shards(2, 0, 3)


def test_random_resized_box_stays_inside_and_follows_scale():
    rng = np.random.default_rng(0)
    areas = []
    for _ in range(500):
        top, left, h, w = random_resized_box(375, 500, (0.08, 1.0), (3 / 4, 4 / 3), rng)
        assert top >= 0
        assert top + h <= 375
        assert left >= 0
        assert left + w <= 500
        areas.append(h * w / (375 * 500))
    assert 0.07 < min(areas) < 0.15
    assert max(areas) > 0.9


def test_centre_box_matches_resize_then_centre_crop():
    assert centre_box(300, 400, 224, 256) == (19, 68, 262, 263)  # 300x400 -> 256x341, crop 224 at (16, 58)
    assert centre_box(400, 300, 224, 256) == (68, 19, 263, 262)


def _jpeg(h: int, w: int, quality: int = 90) -> bytes:
    """A smooth gradient JPEG (scaled decoding keeps it close to the full decode)."""
    y, x = np.mgrid[0:h, 0:w]
    pixels = np.stack([x * 255 // w, y * 255 // h, (x + y) * 255 // (h + w)], axis=-1).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def test_fused_crop_resize_matches_full_decode_then_pil():
    data = _jpeg(450, 480)
    box = (40, 60, 400, 380)  # big crop: decoded at a reduced DCT scale
    full = Image.open(io.BytesIO(data)).convert("RGB")
    expected = np.asarray(full.resize((112, 112), Image.BILINEAR, box=(60, 40, 440, 440)), dtype=np.int16)
    got = crop_resize(data, 450, 480, box, 112).permute(1, 2, 0).numpy().astype(np.int16)
    assert got.shape == (112, 112, 3)
    assert np.abs(got - expected).mean() < 3


def test_eval_pipeline_matches_torchvision_resize_and_centre_crop():
    from torchvision import transforms

    data = _jpeg(375, 500)
    full = Image.open(io.BytesIO(data)).convert("RGB")
    expected = np.asarray(
        transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224)])(full), dtype=np.int16
    )
    got = EvalPipeline(224)(data).permute(1, 2, 0).numpy().astype(np.int16)
    assert np.abs(got - expected).mean() < 3


def test_pipelines_give_uint8_of_the_size_and_are_deterministic():
    data = _jpeg(333, 470)
    train = TrainPipeline(64)
    a, b = train(data, np.random.default_rng([1, 2, 3])), train(data, np.random.default_rng([1, 2, 3]))
    assert a.shape == (3, 64, 64)
    assert a.dtype == torch.uint8
    assert torch.equal(a, b)
    assert EvalPipeline(64)(data).shape == (3, 64, 64)
    assert TrainPipeline(64)(_jpeg(20, 30), np.random.default_rng(0)).shape == (3, 64, 64)  # upscales small images


def test_dct_factor_keeps_the_crop_at_least_the_output():
    assert dct_factor((0, 0, 450, 470), 224) == 2
    assert dct_factor((0, 0, 447, 470), 224) == 1
    assert dct_factor((0, 0, 480, 500), 32) == 8
    assert dct_factor((0, 0, 100, 100), 32) == 2


def test_batches_in_workers_equal_batches_in_process(tiny_shards):
    data = ShardDataset(tiny_shards / "train")
    ids = epoch_indices(data.counts, Layout(), 0, 0)[:40]
    kw = {"seed": 0, "epoch": 0, "drop_last": False}
    inline = [
        b._replace(images=b.images.clone()) for b in batches(data, ids, 16, TrainPipeline(32), 32, workers=0, **kw)
    ]
    pooled = [
        b._replace(images=b.images.clone()) for b in batches(data, ids, 16, TrainPipeline(32), 32, workers=2, **kw)
    ]
    assert [len(b.labels) for b in inline] == [16, 16, 8]
    for a, b in zip(inline, pooled, strict=True):
        assert torch.equal(a.images, b.images)
        assert torch.equal(a.labels, b.labels)
        assert torch.equal(a.ids, b.ids)
    first = inline[0]
    assert first.images.shape == (16, 3, 32, 32)
    assert first.images.dtype == torch.float32
    assert torch.equal(first.labels, torch.from_numpy(data.labels(first.ids.numpy())))
    lo, hi = [(v - m) / s for v, m, s in ((0, MEAN[0], STD[0]), (1, MEAN[0], STD[0]))]
    assert lo - 1e-5 <= first.images[:, 0].min()
    assert first.images[:, 0].max() <= hi + 1e-5


@pytest.mark.parametrize("workers", [0, 2])
def test_a_batch_kept_past_its_reuse_is_an_error_not_silent_corruption(tiny_shards, workers):
    data = ShardDataset(tiny_shards / "train")
    ids = epoch_indices(data.counts, Layout(), 0, 0)[:48]
    loader = batches(data, ids, 8, TrainPipeline(16), 16, seed=0, epoch=0, workers=workers, drop_last=False)
    assert len(loader) == 6
    assert len(loader.pool.buffers) == 2 * workers + 1  # prefetch 2 per worker, plus the slot being copied out
    assert loader.pool.buffers[0].dtype == torch.uint8
    seen = [b.images.sum().item() for b in loader]  # the usual loop: nothing kept, every batch its own pixels
    assert len(set(seen)) == 6
    assert loader.unpooled == 0  # every batch built in the pool, none in a fresh buffer
    with pytest.raises(RuntimeError, match=r"batch 0's images are still referenced.*clone\(\)"):
        list(batches(data, ids, 8, TrainPipeline(16), 16, seed=0, epoch=0, workers=workers, drop_last=False))


def test_pool_builds_a_batch_in_a_fresh_buffer_while_its_slot_is_still_held():
    pool = BatchPool(3, (2, 3, 4, 4))
    assert [pool.take(b)[0] for b in range(3)] == [0, 1, 2]
    slot, fresh = pool.take(3)  # batch 0 (slot 0) not released yet
    assert slot == -1
    assert fresh.shape == (2, 3, 4, 4)
    assert all(fresh is not b for b in pool.buffers)
    assert fresh.dtype == torch.uint8
    pool.release(0, 0)
    assert pool.take(3) == (0, pool.buffers[0])
    pool.release(2, -1)  # a fresh buffer: nothing to give back
    assert pool.take(5)[0] == -1  # slot 2 still holds batch 2


def test_cpu_outputs_refuse_reuse_of_a_batch_still_referenced():
    outputs = Outputs((2, 3, 4, 4), torch.device("cpu"))
    first, second = outputs.take(0), outputs.take(1)
    assert first.dtype == torch.float32
    assert first.data_ptr() != second.data_ptr()
    view = first[:1]
    with pytest.raises(RuntimeError, match=r"batch 0's images are still referenced.*clone\(\)"):
        outputs.take(2)
    del view
    assert outputs.take(2).data_ptr() == first.data_ptr()


@pytest.mark.faults
def test_missing_staged_shard_names_it_and_the_fix(tiny_shards, tmp_path):
    import shutil

    shutil.copytree(tiny_shards / "val", tmp_path / "val")
    (tmp_path / "val" / "shard-00001.srs").unlink()
    data = ShardDataset(tmp_path / "val")
    with pytest.raises(UserError, match=r"shard-00001\.srs.*scalerepro stage"):
        data.record(0)


LOADER_CHECK = """
import json, sys
import numpy as np
from pathlib import Path
from mpi4py import MPI
from scalerepro.data.augment import EvalPipeline, TrainPipeline
from scalerepro.data.loader import ShardDataset, batches, epoch_indices, eval_indices
from scalerepro.data.stage import stage_on_nodes, staged_folder
from scalerepro.data.shards import read_manifest
from scalerepro.mpi import node_layout, this_node

comm = MPI.COMM_WORLD
shards, root = Path(sys.argv[1]), sys.argv[2]
stage_on_nodes(comm, [shards / "train", shards / "val"], root)
at = node_layout(comm)
out = {}
for split, pipe in (("train", TrainPipeline(24)), ("val", EvalPipeline(24))):
    data = ShardDataset(staged_folder(root, read_manifest(shards / split), this_node()), at.node, at.nodes)
    epochs = []
    for epoch in range(2):
        ids = epoch_indices(data.counts, at, 5, epoch) if split == "train" else eval_indices(data.local_ids(), at)
        got = [(b.ids.tolist(), b.labels.tolist()) for b in batches(data, ids, 7, pipe, 24, seed=5, epoch=epoch,
                                                                     workers=1, drop_last=False)]
        epochs.append({"ids": sum((g[0] for g in got), []), "labels": sum((g[1] for g in got), []), "steps": len(got)})
    out[split] = epochs
gathered = comm.gather(out, root=0)
if comm.rank == 0:
    print("RESULT " + json.dumps(gathered))
"""


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_shard_stage_load_round_trip(run_mpi, tiny_shards, tmp_path, ranks):
    proc = run_mpi(ranks, ["-c", LOADER_CHECK, str(tiny_shards), str(tmp_path / "shm")])
    per_rank = json.loads(proc.stdout.split("RESULT ", 1)[1])
    train_total = json.loads((tiny_shards / "train" / "manifest.json").read_text())["samples"]
    val_total = json.loads((tiny_shards / "val" / "manifest.json").read_text())["samples"]
    truth = ShardDataset(tiny_shards / "train")
    for epoch in range(2):
        ids = [i for r in per_rank for i in r["train"][epoch]["ids"]]
        assert len(ids) == len(set(ids))
        assert train_total - len(ids) < ranks  # each sample at most once; remainder only
        assert len({r["train"][epoch]["steps"] for r in per_rank}) == 1  # every rank takes the same steps
        labels = [label for r in per_rank for label in r["train"][epoch]["labels"]]
        assert labels == truth.labels(np.array(ids)).tolist()  # each image arrives with its own label
        assert sorted(i for r in per_rank for i in r["val"][epoch]["ids"]) == list(range(val_total))
    assert per_rank[0]["train"][0]["ids"] != per_rank[0]["train"][1]["ids"]  # reshuffled each epoch


@pytest.mark.parametrize("workers", [0, 2])
def test_gpu_decode_batches_match_cpu_batches_on_the_cpu(tiny_shards, workers):
    from scalerepro.data.gpudecode import EvalCrops, TrainCrops

    data = ShardDataset(tiny_shards / "train")
    ids = epoch_indices(data.counts, Layout(), 0, 0)[:40]
    kw = {"seed": 0, "epoch": 0, "drop_last": False, "workers": workers}
    for cpu_pipe, crop_pipe in ((TrainPipeline(32), TrainCrops(32)), (EvalPipeline(32), EvalCrops(32))):
        cpu = [b._replace(images=b.images.clone()) for b in batches(data, ids, 16, cpu_pipe, 32, **kw)]
        gpu = list(batches(data, ids, 16, crop_pipe, 32, device=torch.device("cpu"), **kw))
        assert [len(b.labels) for b in gpu] == [16, 16, 8]
        for a, b in zip(cpu, gpu, strict=True):
            assert torch.equal(a.ids, b.ids)
            assert torch.equal(a.labels, b.labels)
            assert b.images.dtype == torch.float32
            levels = (a.images - b.images).abs().mean() * 255 * STD[0]  # back to 0-255 levels (roughly)
            # The tiny set's small JPEGs are mostly decoded at 1/2 DCT scale on the CPU path, decoded whole here:
            # 4.4 levels measured on average (tests/data/test_gpudecode.py bounds the pixels themselves).
            assert levels < 8.0
            other = (a.images - b.images.roll(1, dims=0)).abs().mean() * 255 * STD[0]  # another sample's pixels
            assert other > 3 * levels
