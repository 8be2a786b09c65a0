"""Typed, frozen configuration, validated once against the workflow's JSON schema.

The schema (src/scalerepro/schemas/config.schema.yaml, shipped in the package) is
the single source of keys, types, ranges and defaults: Snakemake validates
the workflow config against it at start-up, and every CLI builds its
:class:`Config` through :func:`from_layers`, so both refuse the same input with a
message naming the key.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, ValidationError, validators

from scalerepro.comm.algorithms import ALGORITHMS, AUTO, check_config_grid
from scalerepro.errors import UserError
from scalerepro.io import load_yaml, parse_yaml
from scalerepro.oversubscription import usable_cpus


@dataclass(frozen=True)
class DatasetConfig:
    """The input ImageNet-layout folder (or the synthetic one to generate)."""

    name: str
    root: str
    generate: bool
    seed: int
    classes: int
    train_per_class: int
    val_per_class: int
    min_size: int
    max_size: int
    quirks_per_kind: int

    @property
    def path(self) -> Path:
        """The dataset folder."""
        return Path(self.root) / self.name


@dataclass(frozen=True)
class ShardConfig:
    """Shard counts, the assignment seed and the largest image accepted."""

    train_shards: int
    val_shards: int
    seed: int
    max_pixels: int


@dataclass(frozen=True)
class StageConfig:
    """Where shards are staged on each node, and whether they stay after the sweep."""

    root: str
    keep: bool | None = None

    def kept(self, launcher: str) -> bool:
        """Whether the sweep leaves its staged shards in place: ``keep``, or by default only off SLURM."""
        return self.keep if self.keep is not None else launcher.split()[:1] != ["srun"]


MAIN_GRID = "main"  # the name of train's own grid beside its studies (train.studies)


@dataclass(frozen=True)
class GridPoint:
    """One training run of the sweep: recipe (variant), algorithm, ranks, BN group, seed, repetition."""

    variant: str
    algorithm: str
    ranks: int
    bn_group: int | str
    seed: int
    repetition: int

    @property
    def run_id(self) -> str:
        """The run's name in tables, metrics and MLPerf logs (base runs carry no variant prefix)."""
        return run_id(self.variant, self.algorithm, self.ranks, self.bn_group, self.seed, self.repetition)

    @property
    def path(self) -> str:
        """The run's folder under results/train."""
        return f"{self.variant}/{self.algorithm}/n{self.ranks}/g{self.bn_group}-s{self.seed}-r{self.repetition}"


def run_id(variant: str, algo: str, ranks: int, bn: int | str, seed: int, rep: int) -> str:
    """``ring-n4-g1-s0-r0``; a variant other than base is its prefix: ``lars-ring-n4-g1-s0-r0``."""
    name = f"{algo}-n{ranks}-g{bn}-s{seed}-r{rep}"
    return name if variant == "base" else f"{variant}-{name}"


@dataclass(frozen=True)
class TrainConfig:
    """Model, batch and optimiser settings shared by every training run."""

    ranks: tuple[int, ...]
    algorithms: tuple[str, ...]
    bn_groups: tuple[int | str, ...]
    seeds: tuple[int, ...]
    repetitions: int
    model: str
    width: int
    image_size: int
    batch_per_rank: int
    epochs: int
    base_lr: float
    reference_batch: int
    warmup_epochs: float
    momentum: float
    weight_decay: float
    label_smoothing: float
    target_top1: float
    seed: int
    threads_per_rank: int
    bucket_mib: float
    overlap: bool
    optimizer: str
    nesterov: bool
    lars_eta: float
    lr_schedule: str
    poly_power: float
    decay_epochs: tuple[float, ...]
    decay_factor: float
    bn_group: int | str
    eval_every: int
    checkpoint_every: int
    device: str
    bf16: bool
    variants: Mapping[str, Mapping[str, Any]]
    studies: Mapping[str, Mapping[str, Any]]
    emulate_nodes: int
    variant: str

    def grids(self) -> dict[str, list[GridPoint]]:
        """The runs of each grid: ``main`` (train's own ranks x algorithms x ...), then each study by its name,
        its keys filled as :func:`train_grids` fills them. A run may be in several grids (the base ring at 4 ranks
        is in the main grid and the batch-norm study)."""
        return {
            MAIN_GRID if where == "train" else where.removeprefix("train.studies."): [
                GridPoint(variant, algo, ranks, bn, seed, rep)
                for variant, algo, ranks, bn, seed in itertools.product(
                    g["variants"], g["algorithms"], g["ranks"], g["bn_groups"], g["seeds"]
                )
                for rep in range(self.repetitions)
            ]
            for where, g in train_grids(vars(self)).items()
        }

    def points(self) -> list[GridPoint]:
        """Every training run of the main grid and the studies, each once, in a stable order."""
        return list(dict.fromkeys(p for points in self.grids().values() for p in points))

    def study_descriptions(self) -> dict[str, str]:
        """Each grid's description: the studies' own, and what the main grid sweeps."""
        main = f"the main grid: {', '.join(self.algorithms)} at {', '.join(map(str, self.ranks))} ranks"
        studies = {n: str(s.get("description", "")) for n, s in self.studies.items() if s is not None}
        return {MAIN_GRID: main} | studies

    def bn_group_size(self, world: int) -> int:
        """Ranks per batch-norm group at ``world`` ranks; the error names the key and the counts that fit."""
        group = world if self.bn_group == "world" else int(self.bn_group)
        if world % group:
            fits = [g for g in range(1, world + 1) if world % g == 0]
            raise UserError(
                f"train.bn_group={self.bn_group} does not divide {world} ranks; use one of {fits} or 'world'"
            )
        return group


@dataclass(frozen=True)
class LoaderConfig:
    """Batch building: worker processes, prefetch depth and the crop settings."""

    workers: int
    prefetch: int
    crop_scale: tuple[float, float]
    eval_crop_fraction: float
    decode: str = "cpu"


@dataclass(frozen=True)
class CommConfig:
    """All-reduce parameters (see comm.context.CommParams)."""

    timeout_s: float
    colors: int
    chunk_bytes: int
    grid: tuple[int, ...]
    executor: str
    tuning: str
    dim_algorithms: tuple[str, ...]
    tree_arity: int

    def params(self) -> Any:
        """The CommParams the algorithms take."""
        from scalerepro.comm.context import CommParams

        return CommParams(
            float(self.timeout_s),
            self.colors,
            self.chunk_bytes,
            tuple(self.grid),
            self.executor,
            self.tuning,
            tuple(self.dim_algorithms),
            self.tree_arity,
        )


@dataclass(frozen=True)
class BenchConfig:
    """The all-reduce sweep."""

    ranks: tuple[int, ...]
    algorithms: tuple[str, ...]
    min_bytes: int
    max_bytes: int
    dtype: str
    warmup: int
    iters: int
    min_time_s: float
    max_iters: int
    rounds: int
    check: bool


@dataclass(frozen=True)
class SimulateConfig:
    """The papers' scale in SimGrid: platforms, algorithms, rank counts, gradient types, images per rank."""

    enabled: bool | str  # True, False or "auto"
    platforms: tuple[str, ...]
    algorithms: tuple[str, ...]
    ranks: tuple[int, ...]
    full_max_messages: int
    claims_max_ranks: int
    claims_left_out: tuple[str, ...]
    dtypes: tuple[str, ...]
    batch_per_rank: int
    corners: bool
    sensitivity: bool


@dataclass(frozen=True)
class ClusterConfig:
    """Placement of a run's ranks on SLURM: ranks and GPUs per node, cores and memory per rank, time limits."""

    tasks_per_node: int
    gpus_per_node: int
    cpus_per_task: int
    mem_mb_per_cpu: int
    train_runtime_min: int
    bench_runtime_min: int
    shard_cpus: int = 32
    shard_runtime_min: int = 240
    loader_images_per_s_per_cpu: float | None = None
    max_nodes: int | None = None

    def nodes(self, ranks: int) -> int:
        """Nodes a run of ``ranks`` ranks takes."""
        return -(-ranks // self.tasks_per_node)

    def ranks_per_node(self, ranks: int) -> int:
        """Ranks on each of those nodes."""
        return min(ranks, self.tasks_per_node)

    def launch(self, launcher: str) -> str:
        """The launcher line with each rank's CPUs: since SLURM 22.05 a step started by srun no longer inherits
        the job's --cpus-per-task, so srun gets it; a user-given wrapper gets SRUN_CPUS_PER_TASK, which the
        srun inside it reads; mpiexec (one node, all its cores) is left as it is."""
        first = launcher.split()[0] if launcher.split() else ""
        if first in ("mpiexec", "mpirun") or "cpus-per-task" in launcher.replace("_", "-").lower():
            return launcher
        if first == "srun":
            return f"srun --cpus-per-task={self.cpus_per_task}{launcher[len('srun') :]}"
        return f"env SRUN_CPUS_PER_TASK={self.cpus_per_task} {launcher}"

    def launch_per_node(self, launcher: str, ranks: int) -> str:
        """The launcher line, with its count, for one process on each node of a ``ranks``-rank run (what staging
        needs: a node's first process copies, the others would only wait). mpiexec and srun get the nodes
        and one per node; a user's wrapper, whose placement flags are unknown, starts every rank."""
        first = launcher.split()[0] if launcher.split() else ""
        nodes = self.nodes(ranks)
        if first in ("mpiexec", "mpirun"):
            return f"{launcher} -n {nodes} -ppn 1"
        if first == "srun":
            return f"{self.launch(launcher)} -n {nodes} --ntasks-per-node=1"
        return f"{self.launch(launcher)} -n {ranks}"


@dataclass(frozen=True)
class Config:
    """The whole validated configuration."""

    dataset: DatasetConfig
    shard: ShardConfig
    stage: StageConfig
    train: TrainConfig
    loader: LoaderConfig
    comm: CommConfig
    bench: BenchConfig
    simulate: SimulateConfig
    cluster: ClusterConfig

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (tuples become lists)."""
        plain: dict[str, Any] = json.loads(json.dumps(_asdict(self)))
        return plain

    def for_variant(self, name: str) -> Config:
        """The config one run of train variant ``name`` trains with (base: train as written)."""
        return from_mapping(with_variant(self.to_dict(), name), warn=False)  # warned when self was built

    def run_sections(self, variant: str) -> dict[str, Any]:
        """What one training run of ``variant`` is given: its recipe without the sweep's grid keys (so adding a
        rank count or a study reruns no finished run), and the loader, stage and comm sections."""
        resolved = self.for_variant(variant).to_dict()
        train = {k: v for k, v in resolved["train"].items() if k not in SWEEP_KEYS}
        stage = {"root": resolved["stage"]["root"]}  # not keep: it is the sweep's, not the run's
        return {"train": train, "stage": stage} | {k: resolved[k] for k in ("loader", "comm")}


def _asdict(obj: Any) -> Any:
    """Recursive dataclass -> dict without deep-copying."""
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: _asdict(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, tuple):
        return list(obj)
    return obj


@lru_cache(maxsize=4)
def schema(path: str | None = None) -> dict[str, Any]:
    """The configuration JSON schema (the packaged copy, or the file at ``path``), its algorithm names taken from
    the algorithm table (:data:`scalerepro.comm.algorithms.ALGORITHMS`, then ``auto``)."""
    source = resources.files("scalerepro").joinpath("schemas/config.schema.yaml") if path is None else Path(path)
    doc: dict[str, Any] = parse_yaml(source.read_text(), str(source))
    doc["$defs"]["algorithm"]["enum"] = [*ALGORITHMS, AUTO]
    return doc


def _with_defaults(validator_class: Any) -> Any:
    """A validator class that fills ``default:`` values while validating (as Snakemake does)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator: Any, properties: dict[str, Any], instance: Any, sub: Any) -> Iterator[Any]:
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, json.loads(json.dumps(subschema["default"])))
        yield from validate_properties(validator, properties, instance, sub)

    extend: Callable[..., Any] = validators.extend  # untyped in jsonschema's stubs
    return extend(validator_class, {"properties": set_defaults})


def _finite_numbers(validator_class: Any) -> Any:
    """A validator class whose ``type`` refuses NaN and infinity wherever a value is checked against a type: a
    number key means a finite number (JSON Schema allows them, and every comparison with NaN is false, so
    ``minimum`` and ``maximum`` let NaN through)."""
    check_type = validator_class.VALIDATORS["type"]

    def finite_type(validator: Any, types: Any, instance: Any, sub: Any) -> Iterator[Any]:
        if _non_finite(instance):
            yield ValidationError(f"{instance} is not a finite number")
            return
        yield from check_type(validator, types, instance, sub)

    extend: Callable[..., Any] = validators.extend  # untyped in jsonschema's stubs
    return extend(validator_class, {"type": finite_type})


def _non_finite(value: Any) -> bool:
    """NaN or an infinity (YAML's .nan, .inf, -.inf)."""
    return isinstance(value, float) and not math.isfinite(value)


VALIDATOR = _with_defaults(_finite_numbers(Draft202012Validator))


def _key(path: Any) -> str:
    """Dotted key of a validation error's location."""
    return ".".join(str(p) for p in path) or "<top level>"


def validate(raw: Mapping[str, Any], schema_path: str | None = None) -> dict[str, Any]:
    """Validate a copy of ``raw`` and fill defaults; raise UserError naming every bad key."""
    data: dict[str, Any] = json.loads(json.dumps(dict(raw)))
    validator = VALIDATOR(schema(schema_path))
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = dict.fromkeys(_describe(e) for e in errors)  # a non-finite value fails several keywords alike
        raise UserError("invalid configuration:\n  " + "\n  ".join(lines))
    _check_cross_fields(data)
    return data


def _describe(error: Any) -> str:
    """One line for one schema violation: key, problem, what is allowed."""
    key = _key(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        where = [f"{key}.{u}" if error.absolute_path else u for u in unknown]
        return f"{', '.join(where)}: unknown key; allowed keys here: {', '.join(allowed)}"
    if error.validator == "enum":
        return f"{key}: {error.instance!r} is not one of {error.validator_value}"
    if _non_finite(error.instance):
        return (
            f"{key}: {error.instance} is not a finite number; NaN and infinity (YAML .nan, .inf, -.inf) are refused "
            "for every number: give a finite value"
        )
    hint = _number_as_text(error)
    if hint:
        return f"{key}: {error.instance!r} is text, not a number: {hint}"
    description = error.schema.get("description", "")
    hint = f" ({description.strip()})" if description else ""
    return f"{key}: {error.message}{hint}"


def _as_float(value: Any) -> float | None:
    """``value`` read by Python's float() when it is text that float() reads, else None."""
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None


EXPONENT = re.compile(r"([+-]?)(\d*)\.?(\d*)[eE]([+-]?)(\d+)")


def _number_as_text(error: Any) -> str | None:
    """For a number key given text that float() reads: why YAML read it as text and how to write it (None for
    anything else). YAML 1.1 (PyYAML, which Snakemake and the CLI use) reads ``5e-5`` as text: an exponent needs
    a dot in the number and a sign, as in ``5.0e-5``; ``1e6`` for a whole-number key is ``1000000``."""
    types = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
    value = _as_float(error.instance)
    if error.validator != "type" or value is None or not {"number", "integer"} & set(types):
        return None
    if not math.isfinite(value):
        return "NaN and infinity are refused for every number: give a finite value"
    match = EXPONENT.fullmatch(error.instance.strip())
    if "number" not in types:
        return f"YAML reads it as text; write the whole number {int(value)}" if value.is_integer() else None
    if match is None:
        return f"write {error.instance.strip()} without quotes"
    sign, whole, fraction, exp_sign, exponent = match.groups()
    written = f"{sign}{whole or 0}.{fraction or 0}e{exp_sign or '+'}{exponent}"
    return f"YAML reads a number with an exponent only with a dot and a signed exponent; write {written}"


def _check_cross_fields(data: Mapping[str, Any]) -> None:
    """Constraints a JSON schema cannot state."""
    ds, bench = data["dataset"], data["bench"]
    if ds["min_size"] > ds["max_size"]:
        raise UserError(
            f"invalid configuration:\n  dataset.min_size ({ds['min_size']}) exceeds dataset.max_size ({ds['max_size']})"
        )
    low, high = data["loader"]["crop_scale"]
    if low > high:
        raise UserError(
            f"invalid configuration:\n  loader.crop_scale: [{low}, {high}] is not [min, max]; put the smaller first"
        )
    grids = train_grids(data["train"]) | {"bench": data["bench"]}
    _check_placement(data["cluster"], {k: g["ranks"] for k, g in grids.items()})  # before the variants: they
    _check_train(data)  # repeat train's ranks, and an error there would be named as theirs
    if bench["min_bytes"] > bench["max_bytes"]:
        raise UserError(
            f"invalid configuration:\n  bench.min_bytes ({bench['min_bytes']}) exceeds "
            f"bench.max_bytes ({bench['max_bytes']})"
        )


SWEEP_KEYS = ("ranks", "algorithms", "bn_groups", "seeds", "repetitions", "variants", "studies")
GRID_KEYS = (*SWEEP_KEYS, "variant", "bn_group", "seed")  # what a variant may not set


def train_grids(train: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The main grid ("train") and each study ("train.studies.NAME"), every key filled from the main grid."""
    main = {k: train[k] for k in ("ranks", "algorithms", "bn_groups", "seeds")} | {"variants": ["base"]}
    return {"train": main} | {
        f"train.studies.{name}": main | {k: v for k, v in study.items() if k != "description"}
        for name, study in train["studies"].items()
        if study is not None
    }


def _check_train(data: Mapping[str, Any]) -> None:
    """Per grid: every BN group divides every rank count, its variants exist; nccl needs a GPU device."""
    train = data["train"]
    for where, grid in train_grids(train).items():
        for group in grid["bn_groups"]:
            bad = [r for r in grid["ranks"] if group != "world" and r % group]
            if bad:
                raise UserError(
                    f"invalid configuration:\n  {where}.bn_groups: {group} does not divide {where}.ranks "
                    f"{bad}; use divisors of every rank count, 1 (local) or 'world'"
                )
        unknown = [v for v in grid["variants"] if v != "base" and train["variants"].get(v) is None]
        if unknown:
            raise UserError(
                f"invalid configuration:\n  {where}.variants: {unknown} not defined in train.variants "
                f"(defined: {sorted(train['variants'])}); add them there or use base"
            )
        for v in grid["variants"] if train["variant"] == "base" else []:  # a resolved variant plans no grid
            split = (train if v == "base" else {**train, **train["variants"][v]}).get("emulate_nodes", 0)
            bad = [r for r in grid["ranks"] if split > 1 and r % split]
            if bad:
                raise UserError(
                    f"invalid configuration:\n  {where}: variant {v} emulates {split} nodes, which does "
                    f"not divide ranks {bad}; train those rank counts in another study"
                )
        if "nccl" in grid["algorithms"] and train["device"] == "cpu":
            raise UserError(
                f"invalid configuration:\n  {where}.algorithms: nccl needs train.device cuda or auto, not cpu"
            )
    for name, overrides in train["variants"].items():
        if overrides is not None:
            _check_variant(data, name)


def _check_variant(data: Mapping[str, Any], name: str) -> None:
    """A variant changes only recipe keys, and the recipe it makes validates (errors name train.variants.NAME)."""
    overrides = data["train"]["variants"][name]
    grid = sorted(set(overrides) & set(GRID_KEYS))
    if grid:
        raise UserError(
            f"invalid configuration:\n  train.variants.{name}: {grid} are the grid's keys, not a "
            f"recipe's; set them in train or in a study"
        )
    try:
        with_variant(data, name)
    except UserError as exc:
        raise UserError(str(exc).replace("\n  train.", f"\n  train.variants.{name}.", 1)) from None


def with_variant(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The validated config mapping of variant ``name``: its overrides laid over train, train.variant set."""
    train = dict(data["train"])
    if train["variant"] == name and not train["variants"]:  # already this variant's resolved recipe
        return validate(data)
    if name != "base" and train["variants"].get(name) is None:
        raise UserError(f"train variant {name!r} is not defined; defined: {['base', *sorted(train['variants'])]}")
    train |= dict(train["variants"].get(name) or {}) | {"variant": name, "variants": {}, "studies": {}}
    return validate({**data, "train": train})


def _check_placement(cluster: Mapping[str, Any], ranks: Mapping[str, list[int]]) -> None:
    """Every rank count fills whole nodes once it needs more than one, and fits in cluster.max_nodes when set."""
    per_node, max_nodes = cluster["tasks_per_node"], cluster["max_nodes"]
    most = per_node * max_nodes if max_nodes is not None else None
    for key, counts in ranks.items():
        bad = [r for r in counts if r > per_node and r % per_node]
        if bad:
            raise UserError(
                f"invalid configuration:\n  {key}.ranks {bad} are not multiples of cluster.tasks_per_node "
                f"({per_node}), so some node would be part-filled; use multiples of {per_node}"
            )
        too_many = [r for r in counts if most is not None and r > most]
        if too_many:
            raise UserError(
                f"invalid configuration:\n  {key}.ranks {too_many} exceed the {most} ranks one job can have: "
                f"cluster.max_nodes ({max_nodes}) x cluster.tasks_per_node ({per_node}), so no launcher could "
                f"place them; lower the rank counts to {most} at most, or raise cluster.max_nodes"
            )


class ConfigWarning(UserWarning):
    """A configuration that validates but will likely run worse than it could (the message names the key)."""


def _warn_cluster_cpus(data: Mapping[str, Any], cpus_given: bool) -> None:
    """Warn when cluster.cpus_per_task leaves a rank fewer cores than its loader workers (when the config sets
    it: the local executor ignores the section) or than the model's published rates need at the measured rate."""
    cpus, workers = data["cluster"]["cpus_per_task"], data["loader"]["workers"]
    if cpus_given and cpus < workers + 1:
        warnings.warn(
            f"cluster.cpus_per_task is {cpus}, below loader.workers ({workers}) + 1 for the rank, so the "
            f"workers and the rank share {cpus} cores; raise cluster.cpus_per_task to {workers + 1} or "
            "lower loader.workers",
            ConfigWarning,
            stacklevel=3,
        )
    _warn_published_feed(data)


def _warn_published_feed(data: Mapping[str, Any]) -> None:
    """Warn when cluster.cpus_per_task is below 1 + the loader workers that the most demanding published rate of
    train.model needs at cluster.loader_images_per_s_per_cpu (not checked when that is null)."""
    from scalerepro.baselines import default_path
    from scalerepro.data.feed import most_demanding

    cluster, model, path = data["cluster"], data["train"]["model"], default_path()
    per_cpu, cpus = cluster["loader_images_per_s_per_cpu"], cluster["cpus_per_task"]
    if per_cpu is None:
        return
    if not path.is_file():
        message = f"cluster.loader_images_per_s_per_cpu is set, but {path} is not found: cpus_per_task not checked"
        warnings.warn(message, ConfigWarning, stacklevel=4)
        return
    need = most_demanding(path, model, per_cpu)
    if need is None or cpus >= need["cpus_per_task"]:
        return
    workers = f" and loader.workers to {need['workers']}" if data["loader"]["workers"] < need["workers"] else ""
    warnings.warn(
        f"cluster.cpus_per_task is {cpus}, below the {need['cpus_per_task']} (1 for the rank + {need['workers']} "
        f"loader workers) that feed {model} at {need['images_per_s_per_accelerator']:.0f} images/s per "
        f"accelerator, the rate of {need['source']} in {path}, when one worker builds "
        f"cluster.loader_images_per_s_per_cpu = {per_cpu:g} images/s; raise cluster.cpus_per_task to "
        f"{need['cpus_per_task']}{workers}, or decode on the GPU (loader.decode: gpu)",
        ConfigWarning,
        stacklevel=4,
    )


def _section(cls: type, data: Mapping[str, Any]) -> Any:
    """Build a frozen section, lists turned into tuples."""
    return cls(**{f.name: tuple(v) if isinstance((v := data[f.name]), list) else v for f in fields(cls)})


def from_mapping(raw: Mapping[str, Any], schema_path: str | None = None, warn: bool = True) -> Config:
    """Validate a (possibly partial) config mapping and build the frozen Config (``warn``: also warn about
    what may be fine but likely is not, as :class:`ConfigWarning`)."""
    data = validate(raw, schema_path)
    if warn:
        _warn_cluster_cpus(data, "cpus_per_task" in (raw.get("cluster") or {}))
    return Config(
        dataset=_section(DatasetConfig, data["dataset"]),
        shard=_section(ShardConfig, data["shard"]),
        stage=_section(StageConfig, data["stage"]),
        train=_section(TrainConfig, data["train"]),
        loader=_section(LoaderConfig, data["loader"]),
        comm=_section(CommConfig, data["comm"]),
        bench=_section(BenchConfig, data["bench"]),
        simulate=_section(SimulateConfig, data["simulate"]),
        cluster=_section(ClusterConfig, data["cluster"]),
    )


def check_sweep(data: Mapping[str, Any]) -> None:
    """The workflow's own check: a fixed comm.grid holds every rank count the sweeps launch a grid algorithm at
    (a single launched command checks its grid against the ranks it was launched with instead); and, where
    cluster.max_nodes does not say what the cluster holds, a warning for rank counts this machine could not run."""
    grids = train_grids(data["train"]) | {"bench": data["bench"]}
    ranks = {k: g["ranks"] for k, g in grids.items()}
    check_config_grid(tuple(data["comm"]["grid"]), ranks, {k: g["algorithms"] for k, g in grids.items()})
    if data["cluster"]["max_nodes"] is None:
        _warn_ranks_here(ranks, len(usable_cpus()))


RANKS_PER_CORE = 4  # twice the laptop sweep's 2 per core (4 ranks on 2 cores), so the shipped sweeps plan quietly


def _warn_ranks_here(ranks: Mapping[str, list[int]], cores: int) -> None:
    """Warn when a sweep's rank count is more than RANKS_PER_CORE per core of this machine (``cores``): launched
    here (mpiexec starts every rank on it), each rank would get a sliver of a core. The workflow cannot tell at
    planning time whether its jobs will run here or on SLURM, so it warns rather than refuses; on a cluster,
    cluster.max_nodes states what one job can have and is checked instead."""
    over = {key: big for key, counts in ranks.items() if (big := [r for r in counts if r > RANKS_PER_CORE * cores])}
    if not over:
        return
    named = "; ".join(f"{key}.ranks {counts}" for key, counts in over.items())
    most = max(max(counts) for counts in over.values())
    warnings.warn(
        f"{named}: launched here (mpiexec starts every rank on this machine), {most:,} ranks would be "
        f"{most // cores:,} per core of the {cores} cores here, above {RANKS_PER_CORE} per core (the laptop sweep "
        "runs 2). Lower the rank counts, or, for a cluster, set cluster.max_nodes so the sweep is checked against "
        "it instead",
        ConfigWarning,
        stacklevel=3,
    )


def validate_in_place(config: dict[str, Any], schema_path: str | None = None) -> Config:
    """For the Snakefile: validate the workflow config and its sweeps, fill its defaults in place, return it
    frozen."""
    frozen = from_mapping(config, schema_path)
    check_sweep(frozen.to_dict())
    config.clear()
    config.update(frozen.to_dict())
    return frozen


def from_layers(
    path: str | Path | None = None, inline: str | None = None, overrides: Mapping[str, Mapping[str, Any]] | None = None
) -> Config:
    """Config from a YAML/JSON file, an inline JSON object and single-key overrides (later wins, key by key within a
    section), validated once."""
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise UserError(f"config file {p} not found; pass an existing YAML file (e.g. config/config.yaml)")
        raw = read_config_file(p)
    if inline:
        try:
            extra = json.loads(inline)
        except json.JSONDecodeError as exc:
            raise UserError(f"--config-json is not valid JSON: {exc}") from None
        if not isinstance(extra, dict):
            raise UserError("--config-json must be a JSON object of sections")
        _merge(raw, extra)
    _merge(raw, overrides or {})
    return from_mapping(raw)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The sections of one config file, read as every project YAML file is (:func:`scalerepro.io.load_yaml`:
    file, line and column of a syntax error, both lines of a key given twice); an empty file, or one that holds
    no mapping, is refused naming it (an empty file is more likely a mistake than a wish for every default)."""
    doc = load_yaml(path, "config")
    if doc is None:
        raise UserError(
            f"config file {path} is empty (or only comments); give the sections it sets, e.g. `train: {{epochs: 2}}`"
        )
    if not isinstance(doc, dict):
        raise UserError(f"config file {path} must hold a mapping of sections, not {type(doc).__name__}")
    return doc


def check_config_files(paths: Iterable[str | Path]) -> None:
    """For the Snakefile, before Snakemake reads them: each config file that exists is read as
    :func:`read_config_file` reads it, so a syntax error, an empty file or a key given twice is named with the file
    and its lines (Snakemake's own reading names no file and keeps the last of a repeated key)."""
    for path in paths:
        if Path(path).is_file():
            read_config_file(path)


def _merge(raw: dict[str, Any], sections: Mapping[str, Any]) -> None:
    """Merge ``sections`` into ``raw`` key by key where both hold a mapping; otherwise the new value wins."""
    for section, values in sections.items():
        current = raw.get(section)
        raw[section] = {**current, **values} if isinstance(values, Mapping) and isinstance(current, dict) else values
