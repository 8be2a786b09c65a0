"""Configuration: defaults valid, every bad key or value named, shipped configs valid."""

from __future__ import annotations

import copy
import json
import warnings
from dataclasses import FrozenInstanceError

import pytest
import yaml
from snakemake.utils import update_config

from scalerepro.cli.common import parse_set as _parse_set
from scalerepro.config import ConfigWarning, from_layers, from_mapping, schema, validate, validate_in_place
from scalerepro.errors import UserError
from tests.support import REPO


def test_empty_config_takes_every_default(default_config):
    assert default_config.train.model == "resnet8"
    assert default_config.bench.algorithms == ("native", "ring")


@pytest.mark.parametrize("name", ["config.yaml", "cluster.yaml"])
def test_shipped_configs_are_valid(name):
    cfg = from_layers(REPO / "config" / name)
    assert cfg.train.ranks
    assert cfg.bench.ranks


def test_every_schema_key_has_type_description_default():
    for section, sub in schema()["properties"].items():
        assert {"description", "type", "default"} <= set(sub), section
        for key, spec in sub["properties"].items():
            assert {"description", "default"} <= set(spec), f"{section}.{key}"
            assert {"type", "oneOf"} & set(spec), f"{section}.{key}"


def test_defaults_validate_against_their_own_schema():
    filled = validate({})
    assert validate(filled) == filled


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"train": {"lrr": 1}}, "train.lrr: unknown key"),
        ({"trian": {}}, "trian: unknown key"),
        ({"train": {"base_lr": -1}}, "train.base_lr"),
        ({"train": {"epochs": "ten"}}, "train.epochs"),
        ({"train": {"algorithms": ["bogus"]}}, "train.algorithms.0: 'bogus' is not one of"),
        ({"bench": {"dtype": "int8"}}, "bench.dtype"),
        ({"dataset": {"min_size": 400, "max_size": 100}}, "dataset.min_size (400) exceeds dataset.max_size"),
        ({"bench": {"min_bytes": 64, "max_bytes": 8}}, "bench.min_bytes (64) exceeds bench.max_bytes"),
        ({"train": {"ranks": []}}, "train.ranks"),
        ({"loader": {"crop_scale": [0.9, 0.2]}}, "loader.crop_scale: [0.9, 0.2] is not [min, max]"),
        ({"loader": {"crop_scale": [0.0, 1.0]}}, "loader.crop_scale.0"),
        ({"loader": {"workers": -1}}, "loader.workers"),
    ],
)
@pytest.mark.faults
def test_bad_config_names_the_key(raw, named):
    with pytest.raises(UserError) as err:
        from_mapping(raw)
    assert named in str(err.value)


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (
            {"comm": {"grid": [2, 2]}, "train": {"ranks": [1, 4], "algorithms": ["torus2d"]}},
            "comm.grid [2, 2] holds 4 ranks, but train.ranks has [1] for ['torus2d']",
        ),
        (
            {"comm": {"grid": [2, 3]}, "bench": {"ranks": [4], "algorithms": ["multiring"]}},
            "bench.ranks has [4] for ['multiring']",
        ),
        (
            {"comm": {"grid": [2, 1, 2]}, "train": {"ranks": [4], "algorithms": ["torus2d-3phase"]}},
            "comm.grid [2, 1, 2] has 3 dimensions but train.algorithms ['torus2d-3phase'] need 2",
        ),
    ],
)
@pytest.mark.faults
def test_a_grid_the_sweeps_cannot_launch_is_named_by_the_workflow(raw, named):
    """The workflow checks comm.grid against every rank count its sweeps launch; one command does not (it
    checks the grid against the ranks it was launched with)."""
    with pytest.raises(UserError) as err:
        validate_in_place(dict(raw))
    assert named in str(err.value)
    from_mapping(raw)


def test_config_is_frozen(default_config):
    with pytest.raises(FrozenInstanceError):
        default_config.train.epochs = 3  # type: ignore[misc]


def test_inline_json_overrides_file_per_key(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"train": {"epochs": 3, "width": 8}}))
    cfg = from_layers(path, json.dumps({"train": {"epochs": 5}}))
    assert (cfg.train.epochs, cfg.train.width) == (5, 8)


def test_missing_and_malformed_files_are_named(tmp_path):
    with pytest.raises(UserError, match="nope.yaml not found"):
        from_layers(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [1, 2\n")
    with pytest.raises(UserError, match="bad.yaml, line 2, column 1: not valid YAML"):
        from_layers(bad)
    with pytest.raises(UserError, match="--config-json is not valid JSON"):
        from_layers(None, "{oops")


def test_file_inline_and_overrides_merge_key_by_key_later_winning(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  epochs: 3\n  width: 8\nbench:\n  rounds: 2\n")
    cfg = from_layers(path, '{"train": {"epochs": 4, "seed": 7}}', {"train": {"seed": 9}, "bench": {"rounds": 5}})
    assert (cfg.train.epochs, cfg.train.width, cfg.train.seed, cfg.bench.rounds) == (4, 8, 9, 5)
    with pytest.raises(UserError, match="train.epochs"):
        from_layers(path, None, {"train": {"epochs": -1}})


def test_set_overrides_parse_values_and_reject_bad_syntax():
    assert _parse_set(["train.epochs=2", "train.algorithms=[ring]"]) == {"train": {"epochs": 2, "algorithms": ["ring"]}}
    with pytest.raises(UserError, match="SECTION.KEY=VALUE"):
        _parse_set(["epochs=2"])


@pytest.mark.faults
def test_bn_group_must_divide_every_rank_count_and_is_named():
    with pytest.raises(UserError, match=r"train.bn_groups: 2 does not divide train.ranks \[1, 3\]"):
        from_mapping({"train": {"ranks": [1, 2, 3, 4], "bn_groups": [1, 2]}})
    assert from_mapping({"train": {"ranks": [1, 3], "bn_groups": [1, "world"]}}).train.bn_groups == (1, "world")
    cfg = from_mapping({"train": {"ranks": [2, 4], "bn_group": 2}}).train
    assert cfg.bn_group_size(4) == 2
    assert from_mapping({"train": {"bn_group": "world"}}).train.bn_group_size(6) == 6
    with pytest.raises(UserError, match=r"train.bn_group=2 does not divide 3 ranks; use one of \[1, 3\]"):
        cfg.bn_group_size(3)


def test_a_fixed_grid_that_fits_every_rank_count_is_accepted():
    cfg = from_mapping(
        {
            "comm": {"grid": [2, 2]},
            "train": {"ranks": [4], "algorithms": ["torus2d", "ring"]},
            "bench": {"ranks": [2, 4], "algorithms": ["ring"]},
        }
    )  # bench runs no grid algorithm
    assert cfg.comm.grid == (2, 2)


def test_nccl_needs_a_gpu_device():
    with pytest.raises(UserError, match="nccl needs train.device cuda or auto"):
        from_mapping({"train": {"algorithms": ["nccl"], "device": "cpu"}})


def test_cluster_config_means_the_same_laid_over_the_laptop_one():
    """`snakemake --configfile config/cluster.yaml` merges it over config/config.yaml: no laptop value may leak."""
    laptop = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cluster = yaml.safe_load((REPO / "config" / "cluster.yaml").read_text())
    merged = copy.deepcopy(laptop)
    update_config(merged, cluster)  # Snakemake's own merge (deep: nested keys are added, not replaced)
    assert from_mapping(merged).to_dict() == from_mapping(cluster).to_dict()


STUDIES = {
    "variants": {"lars": {"optimizer": "lars", "batch_per_rank": 128}, "split": {"emulate_nodes": 2}},
    "studies": {
        "all": {"ranks": [4], "algorithms": ["ring", "multiring"], "variants": ["split"]},
        "lars": {"ranks": [4], "variants": ["base", "lars"]},
        "off": None,
    },
}


def test_studies_add_grid_points_once_each():
    train = from_mapping({"train": {"ranks": [1, 4]} | STUDIES}).train
    assert [p.run_id for p in train.points()] == [
        "ring-n1-g1-s0-r0",
        "ring-n4-g1-s0-r0",
        "split-ring-n4-g1-s0-r0",
        "split-multiring-n4-g1-s0-r0",
        "lars-ring-n4-g1-s0-r0",
    ]  # base ring-n4 is in the main grid and the lars study: once
    assert train.points()[2].path == "split/ring/n4/g1-s0-r0"


def test_each_grid_keeps_its_runs_shared_ones_included():
    """The figures' study panels: a run two grids share is listed in both, a study set to null in none."""
    train = from_mapping({"train": {"ranks": [1, 4]} | STUDIES}).train
    grids = {name: [p.run_id for p in points] for name, points in train.grids().items()}
    assert grids == {
        "main": ["ring-n1-g1-s0-r0", "ring-n4-g1-s0-r0"],
        "all": ["split-ring-n4-g1-s0-r0", "split-multiring-n4-g1-s0-r0"],
        "lars": ["ring-n4-g1-s0-r0", "lars-ring-n4-g1-s0-r0"],
    }
    assert train.study_descriptions()["main"] == "the main grid: ring at 1, 4 ranks"


def test_a_study_may_not_take_the_main_grids_name():
    with pytest.raises(UserError, match="train.studies"):
        from_mapping({"train": {"studies": {"main": {"ranks": [4]}}}})


def test_a_variant_lays_its_keys_over_train():
    cfg = from_mapping({"train": {"ranks": [1, 4], "base_lr": 0.3} | STUDIES})
    lars = cfg.for_variant("lars").train
    assert (lars.optimizer, lars.batch_per_rank, lars.base_lr, lars.variant) == ("lars", 128, 0.3, "lars")
    assert cfg.for_variant("base").train == cfg.train.__class__(**{**vars(cfg.train), "variants": {}, "studies": {}})
    with pytest.raises(UserError, match=r"train variant 'nope' is not defined; defined: \['base', 'lars', 'split'\]"):
        cfg.for_variant("nope")


@pytest.mark.parametrize(
    ("train", "message"),
    [
        ({"variants": {"x": {"base_lr": -1}}}, r"train.variants.x.base_lr: -1 is less than or equal to the minimum"),
        ({"variants": {"x": {"ranks": [2]}}}, r"train.variants.x: \['ranks'\] are the grid's keys"),
        ({"variants": {"x": {"bogus": 1}}}, r"train.variants.x.bogus: unknown key"),
        (
            {"studies": {"s": {"variants": ["nope"]}}},
            r"train.studies.s.variants: \['nope'\] not defined in train.variants",
        ),
        ({"studies": {"s": {"ranks": [3], "bn_groups": [2]}}}, r"train.studies.s.bn_groups: 2 does not divide"),
        (
            {"studies": {"s": {"ranks": [3], "variants": ["two"]}}, "variants": {"two": {"emulate_nodes": 2}}},
            r"train.studies.s: variant two emulates 2 nodes, which does not divide ranks \[3\]",
        ),
        ({"studies": {"s": {"ranks": [3], "tasks": 1}}}, r"train.studies.s.tasks: unknown key"),
    ],
)
def test_bad_studies_and_variants_are_named(train, message):
    with pytest.raises(UserError, match=message):
        from_mapping({"train": train})


@pytest.mark.parametrize(
    ("launcher", "line"),
    [
        ("srun --mpi=pmi2", "srun --cpus-per-task=6 --mpi=pmi2"),
        ("mpiexec", "mpiexec"),
        ("srun --cpus-per-task=2 --mpi=pmi2", "srun --cpus-per-task=2 --mpi=pmi2"),  # the user's own wins
        ("/opt/site/launch.sh", "env SRUN_CPUS_PER_TASK=6 /opt/site/launch.sh"),
    ],
)
def test_srun_steps_get_the_cpus_per_task_of_the_cluster_section(launcher, line):
    assert from_mapping({"cluster": {"cpus_per_task": 6}}).cluster.launch(launcher) == line


@pytest.mark.parametrize(
    ("launcher", "ranks", "line"),
    [
        ("mpiexec", 4, "mpiexec -n 1 -ppn 1"),
        ("mpiexec", 12, "mpiexec -n 3 -ppn 1"),
        ("srun --mpi=pmi2", 8, "srun --cpus-per-task=6 --mpi=pmi2 -n 2 --ntasks-per-node=1"),
        ("/opt/site/launch.sh", 8, "env SRUN_CPUS_PER_TASK=6 /opt/site/launch.sh -n 8"),  # placement unknown
    ],
)
def test_staging_starts_one_process_per_node(launcher, ranks, line):
    cluster = from_mapping({"cluster": {"cpus_per_task": 6, "tasks_per_node": 4}}).cluster
    assert cluster.launch_per_node(launcher, ranks) == line


def test_staged_shards_are_removed_after_the_sweep_under_slurm_unless_kept():
    base = from_layers(REPO / "config" / "config.yaml")
    assert base.stage.keep is None
    assert base.stage.kept("mpiexec")
    assert not base.stage.kept("srun --mpi=pmi2")
    kept = from_layers(REPO / "config" / "config.yaml", json.dumps({"stage": {"keep": True}})).stage
    assert kept.kept("srun --mpi=pmi2")
    with pytest.raises(UserError, match="keep"):
        from_layers(REPO / "config" / "config.yaml", json.dumps({"stage": {"keep": "yes"}}))


def test_a_runs_stage_section_leaves_out_keep_so_changing_it_reruns_no_run():
    a = from_layers(REPO / "config" / "config.yaml")
    b = from_layers(REPO / "config" / "config.yaml", json.dumps({"stage": {"keep": True}}))
    assert a.run_sections("base") == b.run_sections("base")


def quiet(build):
    """What ``build()`` returns, failing on any ConfigWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        return build()


def resnet50_on(cpus, per_cpu, workers=1):
    """A config training ResNet-50 on ``cpus`` cores per rank, one loader worker building ``per_cpu`` images/s."""
    cluster = {"cpus_per_task": cpus, "loader_images_per_s_per_cpu": per_cpu}
    return {"train": {"model": "resnet50"}, "loader": {"workers": workers}, "cluster": cluster}


def test_cpus_per_task_below_what_the_fastest_published_rate_needs_warns_naming_the_fix():
    with pytest.warns(ConfigWarning) as caught:
        from_mapping(resnet50_on(2, 733.1))
    (message,) = [str(w.message) for w in caught]
    assert "cluster.cpus_per_task is 2, below the 3 (1 for the rank + 2 loader workers)" in message
    assert "resnet50 at 1025 images/s per accelerator, the rate of Ying et al. 2018 (TPU v3 Pod)" in message
    assert "cluster.loader_images_per_s_per_cpu = 733.1 images/s" in message
    assert "raise cluster.cpus_per_task to 3 and loader.workers to 2, or decode on the GPU" in message
    assert "(loader.decode: gpu)" in message


def test_cpus_per_task_below_the_loader_workers_warns_when_the_config_sets_it():
    with pytest.warns(ConfigWarning, match=r"cluster.cpus_per_task is 4, below loader.workers \(6\) \+ 1"):
        from_mapping({"loader": {"workers": 6}, "cluster": {"cpus_per_task": 4}})


@pytest.mark.parametrize(
    "raw",
    [
        resnet50_on(3, 733.1, workers=2),  # enough for Ying et al.'s 1025 images/s per chip
        resnet50_on(1, None, workers=0),  # rate null: not checked
        resnet50_on(1, 733.1, workers=0) | {"train": {"model": "resnet8"}},  # no published rate for resnet8
        {"loader": {"workers": 6}},  # cpus_per_task not set: the local executor ignores the section
        {"loader": {"workers": 6}, "cluster": {"cpus_per_task": 7}},
    ],
)
def test_enough_cpus_or_nothing_to_check_is_silent(raw):
    quiet(lambda: from_mapping(raw))


def test_shipped_configs_and_a_runs_sections_validate_without_warnings():
    cluster = quiet(lambda: from_layers(REPO / "config" / "cluster.yaml"))
    assert cluster.cluster.loader_images_per_s_per_cpu is not None
    quiet(lambda: from_layers(REPO / "config" / "config.yaml"))
    quiet(lambda: from_mapping(cluster.run_sections("base")))  # what a training job gets: no cluster section
    with pytest.warns(ConfigWarning) as caught:
        low = from_layers(REPO / "config" / "cluster.yaml", overrides={"cluster": {"cpus_per_task": 2}})
    assert ["loader.workers (6) + 1" in str(w.message) for w in caught] == [True, False]
    assert "Ying et al. 2018" in str(caught[1].message)
    quiet(lambda: low.for_variant("base"))  # warned once, when the sweep's config was built
