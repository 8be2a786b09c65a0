# Shared helpers: paths derived from the validated config, and the JSON each
# rule hands to the CLI (only the sections it needs, so a change elsewhere
# does not rerun it). The package re-validates what it receives.

import json
from pathlib import Path

from scalerepro.sim import enabled as simulation_enabled
from scalerepro.sim.engine import SHAPE_KEYS

DATASET = str(CFG.dataset.path)
SPLITS = ["train", "val"]
# One training run per grid point of the main grid and the studies (variant x algorithm x rank
# count x BN group x seed x repetition), each once: scalerepro.config.TrainConfig.points.
POINTS = CFG.train.points()
TRAIN_RUNS = [f"results/train/{p.path}/run.json" for p in POINTS]
# The same runs as MLPerf training logs (:::MLLOG lines, open division), one file per run.
MLPERF_LOGS = [f"results/mlperf/{p.run_id}.txt" for p in POINTS]
BENCH_RUNS = expand("results/bench/n{ranks}.json", ranks=CFG.bench.ranks)
TABLES = expand("results/collect/{table}.csv", table=["runs", "epochs", "evals", "steps", "bench"])
SIM_VALIDATION = expand(
    "results/simulation/{name}", name=["validation.csv", "validation_summary.csv", "validation.json"]
)
SIM_SCALE = expand(
    "results/simulation/{name}",
    name=["scale_points.csv", "scale.csv", "papers.csv", "sensitivity.csv", "scale.json"],
)
# The papers' files (scalerepro.papers): their claims, at-scale claims, baselines and presets.
PAPERS = sorted(str(p) for p in Path("config/papers").glob("*.yaml"))
SIMULATION = SIM_VALIDATION + SIM_SCALE if simulation_enabled(CFG.simulate.enabled) else []
ANALYSIS = expand(
    "results/analysis/{name}.csv",
    name=[
        "runs",
        "scaling",
        "busbw",
        "comparison",
        "tta",
        "simulated",
        "papers",
        "sensitivity",
        "validation",
        "accuracy",
        "recipes",
        "studies",
    ],
)
FIGURES = [
    "scaling",
    "scaling_efficiency",
    "time_to_accuracy",
    "allreduce_busbw",
    "step_breakdown",
    "simulation_validation",
    "simulation_scale",
    "simulation_sensitivity",
    "accuracy_by_algorithm",
    "recipe_effects",
]
PLOTS = expand("results/plots/{fig}.png", fig=FIGURES)
PLOTS_SVG = expand("results/plots/{fig}.svg", fig=FIGURES)


wildcard_constraints:
    variant="[a-z][a-z0-9-]*",
    algo="[a-z0-9-]+",
    ranks=r"\d+",
    bn=r"\d+|world",
    seed=r"\d+",
    rep=r"\d+",
    split="train|val",


def sections(*names):
    """The named config sections, or single keys (section.key), as one JSON object for --config-json."""
    picked = {}
    for name in names:
        section, _, key = name.partition(".")
        if key:
            picked.setdefault(section, {})[key] = config[section][key]
        else:
            picked[section] = config[section]
    return json.dumps(picked, sort_keys=True)


def mpi_resources(runtime_min, gpus=True, **extra):
    """SLURM resources of a job of {ranks} MPI ranks, placed per the cluster section.

    Whole nodes of cluster.tasks_per_node ranks (--nodes, --ntasks-per-node, gres gpu:N per
    node, --cpus-per-task); one rank per node uses --ntasks instead (the plugin refuses
    tasks_per_node=1 for MPI jobs); a 1-rank job is not an MPI job for the plugin (mpi="").
    The ranks are launched by `launcher` (mpiexec here; the SLURM profile sets srun). gpus=False: a job
    that uses none (the bench sums host buffers) asks for none.
    """
    place = CFG.cluster

    def per_node(w):
        return place.ranks_per_node(int(w.ranks))

    return dict(
        launcher="mpiexec",
        mpi=lambda w: "mpi" if int(w.ranks) > 1 else "",
        nodes=lambda w: place.nodes(int(w.ranks)),
        tasks_per_node=lambda w: per_node(w) if per_node(w) > 1 else 0,
        tasks=lambda w: int(w.ranks) if per_node(w) == 1 else 0,
        cpus_per_task=place.cpus_per_task,
        gres=lambda w: f"gpu:{per_node(w)}" if place.gpus_per_node and gpus else "",
        mem_mb_per_cpu=place.mem_mb_per_cpu,
        runtime=runtime_min,
        **extra,
    )
