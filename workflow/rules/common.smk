# Shared helpers: paths derived from the validated config, and the JSON each
# rule hands to the CLI (only the sections it needs, so a change elsewhere
# does not rerun it). The package re-validates what it receives.

import json
from pathlib import Path

DATASET = str(CFG.dataset.path)
SPLITS = ["train", "val"]
TRAIN_RUNS = expand("results/train/{algo}/n{ranks}/run.json", algo=CFG.train.algorithms, ranks=CFG.train.ranks)
BENCH_RUNS = expand("results/bench/n{ranks}.json", ranks=CFG.bench.ranks)
TABLES = expand("results/collect/{table}.csv", table=["runs", "epochs", "evals", "steps", "bench"])
ANALYSIS = expand("results/analysis/{name}.csv", name=["runs", "scaling", "busbw", "comparison", "tta"])
PLOTS = expand(
    "results/plots/{fig}.png", fig=["scaling", "time_to_accuracy", "allreduce_busbw", "step_breakdown"]
)


wildcard_constraints:
    algo="[a-z0-9-]+",
    ranks=r"\d+",
    split="train|val",


def sections(*names):
    """The named config sections as one JSON object for --config-json."""
    return json.dumps({name: config[name] for name in names}, sort_keys=True)
