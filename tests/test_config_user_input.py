"""What a user may write into a config that must not cost a run: NaN and infinity, a key given twice, a number YAML
reads as text, a config file that is not YAML, more ranks than the machine or cluster holds. Each is refused (or,
where it may be meant, warned about) naming the file or key, before any job; the CLI exits 2 without a traceback.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import warnings
from pathlib import Path

import pytest
import yaml

from scalerepro import config as config_module
from scalerepro.cli.argtypes import finite, positive
from scalerepro.config import ConfigWarning, from_layers, from_mapping, schema, validate_in_place
from scalerepro.errors import UserError
from scalerepro.io import load_yaml, read_yaml
from scalerepro.sim.platforms import load_platforms
from tests.support import REPO, cli, refused
from tests.workflow.support import snakemake

pytestmark = pytest.mark.faults

NOT_FINITE = "is not a finite number; NaN and infinity (YAML .nan, .inf, -.inf) are refused for every number"


def train(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``scalerepro train`` with ``flags``: the configuration is refused before the shards are looked at."""
    return cli("train", "--algo", "ring", "--shards", str(tmp_path / "none"), "--out", str(tmp_path / "run"), *flags)


def dry_run(*args: str) -> subprocess.CompletedProcess[str]:
    """``snakemake -n`` of the checkout's workflow (a dry run writes nothing), its output in ``stdout``."""
    proc = snakemake(REPO, "-n", "--cores", "1", *args)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout + proc.stderr, "")


def number_keys() -> list[str]:
    """Every scalar key of the schema that takes a number (or a whole number)."""
    keys = []
    for section, sub in schema()["properties"].items():
        for key, spec in sub["properties"].items():
            types = spec.get("type", [s.get("type") for s in spec.get("oneOf", [])])
            if {"number", "integer"} & set(types if isinstance(types, list) else [types]):
                keys.append(f"{section}.{key}")
    return keys


# 1. NaN and infinity


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused_for_every_number_key(value):
    keys = number_keys()
    assert {"train.base_lr", "train.label_smoothing", "train.epochs", "cluster.loader_images_per_s_per_cpu"} <= set(
        keys
    )
    for dotted in keys:
        section, key = dotted.split(".")
        with pytest.raises(UserError) as err:
            from_mapping({section: {key: value}})
        assert str(err.value) == f"invalid configuration:\n  {dotted}: {value} {NOT_FINITE}: give a finite value"
    for raw, where in [
        ({"loader": {"crop_scale": [0.1, value]}}, "loader.crop_scale.1"),
        ({"train": {"variants": {"v": {"base_lr": value}}}}, "train.variants.v.base_lr"),
    ]:
        with pytest.raises(UserError, match=rf"{where}: {value} is not a finite number"):
            from_mapping(raw)


def test_nan_in_a_config_file_or_set_is_refused_by_the_cli(tmp_path):
    path = tmp_path / "nan.yaml"
    path.write_text("train:\n  base_lr: .nan\n  label_smoothing: .inf\n")
    refused(train(tmp_path, "--config", str(path)), f"train.base_lr: nan {NOT_FINITE}", "train.label_smoothing: inf")
    refused(train(tmp_path, "--set", "train.base_lr=.nan"), f"train.base_lr: nan {NOT_FINITE}")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "Infinity", "1e400"])
def test_number_flags_refuse_nan_and_infinity(tmp_path, text):
    for parse in (finite, positive):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a finite number; NaN and infinity are refused"):
            parse(text)
    proc = cli("simulate-scale", "--platform", "kumar-minsky", f"--bucket-mib={text}", "--out", str(tmp_path))
    refused(proc, f"argument --bucket-mib: {text!r} is not a finite number")


def test_the_workflow_refuses_nan_before_planning(tmp_path):
    path = tmp_path / "nan.yaml"
    path.write_text("train:\n  base_lr: .nan\n")
    proc = dry_run("--configfile", str(path))
    assert proc.returncode == 1
    assert f"train.base_lr: nan {NOT_FINITE}" in proc.stdout
    assert "Building DAG" not in proc.stdout


# 2. A key given twice


@pytest.mark.parametrize(
    ("text", "key", "lines"),
    [
        ("train:\n  epochs: 2\nbench:\n  iters: 3\ntrain:\n  epochs: 3\n", "train", (1, 5)),
        ("train:\n  epochs: 2\n  width: 8\n  epochs: 3\n", "train.epochs", (2, 4)),
        ("claims:\n  - id: a\n    scope: x\n    id: b\n", "claims.0.id", (2, 4)),
        ("a: &x {k: 1}\nb:\n  <<: *x\n  k: 2\n", None, None),  # a merge key's value laid under: not a repeat
    ],
)
def test_a_key_given_twice_is_refused_naming_the_file_the_key_and_both_lines(tmp_path, text, key, lines):
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    if key is None:
        assert read_yaml(path, "config")["b"] == {"k": 2}
        return
    with pytest.raises(UserError) as err:
        load_yaml(path, "config")
    assert str(err.value) == (
        f"{path}: key {key} is given twice, at lines {lines[0]} and {lines[1]}; YAML would keep only the second: "
        "delete one"
    )


def test_every_yaml_loader_refuses_a_key_given_twice(tmp_path):
    """The config, the platforms, papers, sources and baselines files are all read by scalerepro.io.load_yaml."""
    path = tmp_path / "platforms.yaml"
    path.write_text("platforms:\n  p:\n    shape: torus\n    shape: fattree\n")
    with pytest.raises(UserError, match=r"key platforms.p.shape is given twice, at lines 3 and 4"):
        load_platforms(path)
    config = tmp_path / "twice.yaml"
    config.write_text("train:\n  epochs: 2\ntrain:\n  epochs: 3\n")
    refused(train(tmp_path, "--config", str(config)), f"{config}: key train is given twice, at lines 1 and 3")
    proc = dry_run("--configfile", str(config))
    assert proc.returncode == 1
    assert f"{config}: key train is given twice, at lines 1 and 3" in proc.stdout


def test_the_shipped_yaml_files_have_no_key_twice():
    for path in [*sorted((REPO / "config").rglob("*.yaml")), *sorted((REPO / "workflow").rglob("*.yaml"))]:
        load_yaml(path, "shipped")


# 3. A number that YAML 1.1 reads as text


@pytest.mark.parametrize(
    ("key", "text", "fix"),
    [
        (
            "train.weight_decay",
            "5e-5",
            "YAML reads a number with an exponent only with a dot and a signed exponent; write 5.0e-5",
        ),
        ("train.base_lr", "-.5E3", "write -0.5e+3"),
        ("train.base_lr", "1.e2", "write 1.0e+2"),
        ("train.momentum", "0.9", "write 0.9 without quotes"),
        ("bench.max_bytes", "1e6", "YAML reads it as text; write the whole number 1000000"),
        ("train.base_lr", "nan", "NaN and infinity are refused for every number: give a finite value"),
    ],
)
def test_a_number_read_as_text_says_how_to_write_it(key, text, fix):
    section, name = key.split(".")
    with pytest.raises(UserError) as err:
        from_mapping({section: {name: text}})
    message = str(err.value)
    assert message.startswith(f"invalid configuration:\n  {key}: {text!r} is text, not a number: ")
    assert message.endswith(fix)
    written = fix.rpartition("write ")[2].removesuffix(" without quotes").removeprefix("the whole number ")
    if "finite" not in fix:  # what it says to write, YAML reads as the number float() read
        assert yaml.safe_load(written) == float(text)
        assert not isinstance(yaml.safe_load(written), str)


def test_weight_decay_5e_minus_5_in_a_file_is_refused_saying_how_to_write_it(tmp_path):
    path = tmp_path / "wd.yaml"
    path.write_text("train:\n  weight_decay: 5e-5\n")
    assert read_yaml(path, "config")["train"]["weight_decay"] == "5e-5"  # YAML 1.1: text
    refused(train(tmp_path, "--config", str(path)), "train.weight_decay: '5e-5' is text, not a number", "5.0e-5")
    refused(train(tmp_path, "--set", "train.weight_decay=5e-5"), "write 5.0e-5")
    path.write_text("train:\n  weight_decay: 5.0e-5\n")
    assert from_layers(path).train.weight_decay == 5e-5


# 4. A config file that is not YAML, or empty


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("train: [1, 2\n", "config/config.yaml, line 2, column 1: not valid YAML (expected ',' or ']'"),
        ("", "config file config/config.yaml is empty (or only comments); give the sections it sets"),
        ("# only a comment\n", "config file config/config.yaml is empty"),
        ("- train\n", "config file config/config.yaml must hold a mapping of sections, not list"),
    ],
)
def test_the_workflow_names_a_default_config_file_that_is_not_yaml_or_empty(tmp_path, text, named):
    """The Snakefile reads config/config.yaml (of the working directory, here a bare one) before Snakemake does."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(text)
    proc = dry_run("--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path))
    assert proc.returncode == 1
    assert named in proc.stdout, proc.stdout
    assert "Building DAG" not in proc.stdout


@pytest.mark.parametrize(
    ("text", "snakemake_says"),
    [
        ("train: [1, 2\n", "Config file is not valid JSON or YAML"),
        ("", "Config file must be given as JSON or YAML with keys at top level"),
    ],
)
def test_a_configfile_that_is_not_yaml_is_refused_by_snakemake_before_the_snakefile(tmp_path, text, snakemake_says):
    """Snakemake reads --configfile files while parsing its command line, before the Snakefile runs, and its
    message names no file: only Snakemake could name it (snakemake/common/configfile.py). It stops before any job."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    proc = dry_run("--configfile", str(path))
    assert proc.returncode == 1
    assert snakemake_says in proc.stdout
    assert "Building DAG" not in proc.stdout


def test_the_cli_names_a_config_file_that_is_not_yaml_or_empty(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train: [1, 2\n")
    refused(train(tmp_path, "--config", str(path)), f"{path}, line 2, column 1: not valid YAML")
    path.write_text("")
    refused(train(tmp_path, "--config", str(path)), f"config file {path} is empty (or only comments)")


# 5. More ranks than the cluster or this machine holds


def test_more_ranks_than_cluster_max_nodes_hold_are_refused():
    cluster = {"tasks_per_node": 8, "max_nodes": 32}
    with pytest.raises(UserError) as err:
        from_mapping({"train": {"ranks": [8, 256, 100000]}, "cluster": cluster})
    assert str(err.value) == (
        "invalid configuration:\n  train.ranks [100000] exceed the 256 ranks one job can have: cluster.max_nodes "
        "(32) x cluster.tasks_per_node (8), so no launcher could place them; lower the rank counts to 256 at most, "
        "or raise cluster.max_nodes"
    )
    with pytest.raises(UserError, match=r"train.studies.big.ranks \[512\] exceed the 256 ranks"):
        from_mapping({"train": {"ranks": [8], "studies": {"big": {"ranks": [512]}}}, "cluster": cluster})
    with pytest.raises(UserError, match=r"bench.ranks \[264\] exceed the 256 ranks"):
        from_mapping({"bench": {"ranks": [8, 264]}, "cluster": cluster})
    assert from_mapping({"train": {"ranks": [8, 256]}, "cluster": cluster}).cluster.max_nodes == 32


def test_the_cli_and_the_workflow_refuse_more_ranks_than_the_cluster_holds(tmp_path):
    refused(train(tmp_path, "--set", "cluster.max_nodes=1", "--set", "train.ranks=[16]"), "train.ranks [16] exceed")
    path = tmp_path / "big.yaml"
    path.write_text("train:\n  ranks: [1, 100000]\ncluster:\n  max_nodes: 4\n")
    proc = dry_run("--configfile", str(path))
    assert proc.returncode == 1
    assert "train.ranks [100000] exceed the 32 ranks one job can have" in proc.stdout


def test_a_sweep_of_more_than_four_ranks_per_core_here_warns_naming_the_count_and_the_cores(monkeypatch):
    monkeypatch.setattr(config_module, "usable_cpus", lambda: {0, 1})
    with pytest.warns(ConfigWarning) as caught:
        validate_in_place({"train": {"ranks": [1, 100000]}, "bench": {"ranks": [2, 16]}})
    (message,) = [str(w.message) for w in caught]
    assert message.startswith("train.ranks [100000]; bench.ranks [16]: launched here (mpiexec starts every rank")
    assert "100,000 ranks would be 50,000 per core of the 2 cores here, above 4 per core" in message
    assert "set cluster.max_nodes so the sweep is checked against it instead" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        validate_in_place(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))  # 4 ranks on 2 cores
        validate_in_place({"train": {"ranks": [100000]}, "cluster": {"max_nodes": 12500}})  # the cluster's check


def test_the_workflow_warns_of_a_laptop_sweep_of_100000_ranks(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("train:\n  ranks: [1, 100000]\n")
    proc = dry_run("--configfile", str(path))
    assert proc.returncode == 0, proc.stdout
    assert "ConfigWarning: train.ranks [100000]: launched here" in proc.stdout
