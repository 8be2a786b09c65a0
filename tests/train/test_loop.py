"""Training: schedule, gradient buckets, a real 2-rank run, clear errors."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
import sys

import pytest
import torch

from scalerepro.config import from_mapping
from scalerepro.train.buckets import Buckets
from scalerepro.train.events import read_events
from scalerepro.train.model import build
from scalerepro.train.optim import learning_rate, param_groups, peak_lr
from tests.support import train_args


def test_lr_scales_warms_up_and_decays():
    cfg = from_mapping(
        {"train": {"base_lr": 0.1, "reference_batch": 64, "batch_per_rank": 32, "warmup_epochs": 1, "epochs": 4}}
    ).train
    assert peak_lr(cfg, 4) == pytest.approx(0.2)
    lrs = [learning_rate(cfg, 4, s, 10) for s in range(40)]
    assert lrs[0] == pytest.approx(0.02)
    assert lrs[9] == pytest.approx(0.2)
    assert all(a >= b for a, b in itertools.pairwise(lrs[9:]))  # from the warm-up's end on
    assert lrs[-1] < 0.01


def test_buckets_cover_every_parameter_once_in_reverse_order():
    model = build("resnet8", 10, 8)
    params = list(model.parameters())
    buckets = Buckets(params, cap_bytes=4096, reduce=lambda _: None, world=1)
    flat = [p for g in buckets.groups for p in g]
    assert len(buckets.groups) > 1
    assert [id(p) for p in flat] == [id(p) for p in reversed(params)]


def test_no_weight_decay_on_bn_and_bias():
    groups = param_groups(build("resnet8", 10, 8), 5e-4)
    assert all(p.ndim > 1 for p in groups[0]["params"])
    assert groups[1]["weight_decay"] == 0.0
    assert all(p.ndim <= 1 for p in groups[1]["params"])


def test_unknown_model_is_named():
    from scalerepro.errors import UserError

    with pytest.raises(UserError, match="unknown model 'vgg'"):
        build("vgg", 10, 8)


@pytest.mark.mpi
def test_two_rank_run_logs_events_and_record(run_mpi, tiny_shards, tmp_path):
    out = tmp_path / "run"
    run_mpi(2, train_args(tiny_shards, out, "train.epochs=2", "train.width=8", "train.batch_per_rank=16"))
    record = json.loads((out / "run.json").read_text())
    assert record["world_size"] == 2
    assert record["algorithm"] == "ring"
    assert record["data"]["train_sha256"]
    assert record["versions"]["torch"] == torch.__version__
    keys = [e["key"] for e in read_events(out / "events.jsonl")]
    assert keys[:3] == ["init_start", "init_stop", "run_start"]
    assert keys[-1] == "run_stop"
    assert keys.count("epoch_stop") == 2
    assert keys.count("eval_accuracy") == 2
    assert keys.count("eval_start") == keys.count("eval_stop") == 2
    steps = [e for e in read_events(out / "events.jsonl") if e["key"] == "step"]
    assert len(steps) == 2 * 4  # 120 samples / 2 ranks / 16 per batch = 4 steps per epoch
    assert {"data_s", "fwd_bwd_s", "allreduce_s", "optimizer_s"} <= set(steps[0]["metadata"])


@pytest.mark.mpi
def test_decode_gpu_trains_and_evaluates_through_the_crops_path(run_mpi, tiny_shards, tmp_path):
    out = tmp_path / "run"
    run_mpi(1, train_args(tiny_shards, out, "train.epochs=1", "train.width=8", "loader.decode=gpu"))
    keys = [e["key"] for e in read_events(out / "events.jsonl")]
    assert keys[-1] == "run_stop"
    assert keys.count("eval_accuracy") == 1
    losses = [e["metadata"]["loss"] for e in read_events(out / "events.jsonl") if e["key"] == "step"]
    assert losses
    assert all(math.isfinite(x) for x in losses)


@pytest.mark.mpi
def test_unstaged_shards_fail_with_the_fix(run_mpi, tiny_shards, tmp_path):
    settings = f"stage.root={tmp_path / 'empty'}"
    proc = run_mpi(2, train_args(tiny_shards, tmp_path / "run", settings, stage=True), check=False)
    assert proc.returncode != 0
    assert "are not staged" in proc.stderr
    assert "scalerepro stage" in proc.stderr
    assert not (tmp_path / "run" / "run.json").exists()


@pytest.mark.faults
def test_splits_sharded_from_different_datasets_are_refused(tiny_shards, tmp_path):
    mixed = tmp_path / "mixed"
    shutil.copytree(tiny_shards, mixed)
    manifest = json.loads((mixed / "val" / "manifest.json").read_text())
    manifest["classes"] = manifest["classes"][::-1]  # the same wnids in another dataset's order
    (mixed / "val" / "manifest.json").write_text(json.dumps(manifest))
    proc = subprocess.run(
        [sys.executable, *train_args(mixed, tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "have different class lists (sharded from different datasets)" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_refused_and_auto_falls_back():
    from mpi4py import MPI

    from scalerepro.errors import UserError
    from scalerepro.train.trainer import resolve_device

    with pytest.raises(UserError, match="train.device=cuda but torch sees no GPU"):
        resolve_device("cuda", MPI.COMM_SELF)
    assert resolve_device("auto", MPI.COMM_SELF).type == "cpu"


def test_overlapped_buckets_launch_in_order_and_average():
    model = build("resnet8", 10, 4)
    cfg = from_mapping({"train": {"width": 4, "bucket_mib": 0.001, "overlap": True}}).train
    seen = []

    def reduce(t):
        seen.append(t.numel())
        t.mul_(2)  # as if a second rank had the same gradients

    from scalerepro.train.trainer import Trainer

    trainer = Trainer(model, cfg, reduce, world=2)
    x, _y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    trainer.model(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    assert len(trainer.buckets._futures) == len(trainer.buckets.groups)  # every bucket started during backward
    busy = trainer.buckets.synchronize()
    trainer.close()
    assert seen == [b.numel() for b in trainer.buckets.buffers]
    assert len(seen) > 1
    assert busy >= 0
    assert all(torch.allclose(p.grad, g) for p, g in zip(model.parameters(), grads, strict=True))  # sum of 2 / 2 ranks


@pytest.mark.mpi
def test_multicolor_at_three_ranks_records_its_colors(run_mpi, tiny_shards, tmp_path):
    """A multicolor run's run.json names the 2 colors its gradient bucket used, and their trees' roots."""
    out = tmp_path / "run"
    run_mpi(
        3,
        [
            "-m",
            "scalerepro.cli",
            "train",
            "--algo",
            "multicolor",
            "--shards",
            str(tiny_shards),
            "--out",
            str(out),
            "--no-stage",
            "--set",
            "train.epochs=1",
            "--set",
            "train.batch_per_rank=8",
        ],
    )
    (bucket,) = json.loads((out / "run.json").read_text())["allreduce"]
    assert bucket["algorithm"] == "multicolor"
    assert bucket["colors"] == 2
    assert len(set(bucket["roots"])) == 2


@pytest.mark.mpi
def test_a_variant_emulating_two_nodes_gives_hierarchical_its_node_phases(run_mpi, tiny_shards, tmp_path):
    out = tmp_path / "run"
    variants = json.dumps({"train": {"variants": {"two-nodes": {"emulate_nodes": 2, "batch_per_rank": 8}}}})
    run_mpi(
        4,
        [
            "-m",
            "scalerepro.cli",
            "train",
            "--algo",
            "hierarchical",
            "--shards",
            str(tiny_shards),
            "--out",
            str(out),
            "--no-stage",
            "--config-json",
            variants,
            "--variant",
            "two-nodes",
            "--set",
            "train.epochs=1",
        ],
    )
    record = json.loads((out / "run.json").read_text())
    (bucket,) = record["allreduce"]
    assert (bucket["nodes"], bucket["ranks_per_node"]) == (2, 2)
    assert "as" not in bucket
    assert record["config"]["train"]["variant"] == "two-nodes"
    assert record["config"]["train"]["batch_per_rank"] == 8


def test_threads_per_rank_follow_the_cpu_affinity_not_the_machine():
    """A rank pinned to one CPU (srun --cpus-per-task=1, a cgroup) runs one intra-op thread, whatever the node has."""
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); from mpi4py import MPI; "
        "from scalerepro.config import from_mapping; from scalerepro.train.loop import threads_for; "
        "print(threads_for(from_mapping({}).train, MPI.COMM_WORLD))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split()[-1] == "1"
