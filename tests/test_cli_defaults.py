"""A setting has one home: the schema writes each key's default and range, and no command writes its own.

A flag that sets a config key is declared with ``scalerepro.cli.common.setting``: it has no
default of its own, the schema checks what it is given, and unset the
command takes the configuration's value. Every other flag whose name is a
key of the schema is listed below with why it is not that key.
"""

from __future__ import annotations

import argparse

import pytest

from scalerepro import cli
from scalerepro.cli.common import load_config
from scalerepro.config import schema
from scalerepro.errors import UserError

# (command, flag dest) -> why the flag is not the schema key of that name
NOT_CONFIG = {
    ("stage", "root"): "the node-memory folder of one staging call; the rule passes stage.root",
    ("train", "variant"): "the variant this run is (a grid point's), which selects the config sections",
    ("bench", "device"): "where the bench's buffers live; train.device is training's",
    ("bench-train", "warmup"): "untimed training steps; bench.warmup counts all-reduce iterations",
    ("bench-train", "classes"): "the synthetic labels' classes of a benchmark on random tensors",
    ("bench-loader", "workers"): "the worker counts the loader benchmark compares, a list; loader.workers is one",
    ("bench-loader", "seed"): "the seed of the benchmark's own generated images",
    ("bench-loader", "model"): "the model whose step rate sets the loader's bar; train.model is what trains",
    ("cost-model", "platforms"): "the platforms file; simulate.platforms names platforms in it (--platform)",
    ("simulate", "platforms"): "the platforms file; simulate.platforms names platforms in it (--platform)",
    ("simulate", "ranks"): "the rank counts of one free-standing simulation; simulate.ranks is the scale grid",
    ("simulate-validate", "platforms"): "the platforms file; simulate.platforms names platforms in it",
    ("simulate-scale", "platforms"): "the platforms file; simulate.platforms names platforms in it (--platform)",
    ("algorithms", "name"): "the algorithm to describe; dataset.name names the dataset",
}


def schema_keys() -> dict[str, list[str]]:
    """Leaf key name -> every section.key of the schema with that name."""
    keys: dict[str, list[str]] = {}
    for section, spec in schema()["properties"].items():
        for name in spec.get("properties", {}):
            keys.setdefault(name, []).append(f"{section}.{name}")
    return keys


def commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_setting_flag_names_a_schema_key_and_writes_no_default():
    keys = {k for ks in schema_keys().values() for k in ks}
    for name, p in commands().items():
        for dest, (key, _) in (p.get_default("settings") or {}).items():
            assert key in keys, (name, dest, key)
            assert p.get_default(dest) is None, (name, dest)


def test_no_command_writes_its_own_default_for_a_config_key():
    keys = schema_keys()
    own = {
        (name, a.dest)
        for name, p in commands().items()
        for a in p._actions
        if a.dest in keys and a.dest not in (p.get_default("settings") or {})
    }
    assert own == set(NOT_CONFIG)


def resolved(*argv: str):
    args = cli.parser().parse_args(["simulate-scale", "--out", "x", *argv])
    return load_config(args)


def test_unset_setting_flags_take_the_schema_defaults():
    defaults = schema()["properties"]
    cfg = resolved()
    sim = defaults["simulate"]["properties"]
    for key in ("ranks", "algorithms", "dtypes", "platforms"):
        assert list(getattr(cfg.simulate, key)) == sim[key]["default"], key
    for key in ("claims_max_ranks", "batch_per_rank", "corners", "sensitivity"):
        assert getattr(cfg.simulate, key) == sim[key]["default"], key
    assert cfg.comm.colors == defaults["comm"]["properties"]["colors"]["default"]
    assert cfg.train.bucket_mib == defaults["train"]["properties"]["bucket_mib"]["default"]


def test_a_setting_flag_sets_its_key_over_the_config_and_set(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("simulate:\n  ranks: [16]\n  corners: true\n")
    cfg = resolved("--config", str(config), "--set", "simulate.ranks=[32]", "--ranks", "8,128", "--no-corners")
    assert cfg.simulate.ranks == (8, 128)
    assert cfg.simulate.corners is False
    assert resolved("--config", str(config)).simulate.corners is True
    assert resolved("--dtypes", "float32,bfloat16", "--bucket-mib", "12.5").train.bucket_mib == 12.5


def test_the_schema_checks_a_setting_flag():
    with pytest.raises(UserError, match="simulate.ranks"):
        resolved("--ranks", "8,-1")
    with pytest.raises(SystemExit):  # argparse: at least 1
        resolved("--claims-max-ranks", "0")
