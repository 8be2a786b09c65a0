"""The Snakemake workflow: lint, dry-runs (laptop, cluster, SLURM profile), config errors, a real laptop run."""

from __future__ import annotations

import copy
import csv
import json
import re

import pytest
import yaml
from snakemake.utils import update_config

from scalerepro import sources
from scalerepro.analysis.plots import FIGURES
from scalerepro.config import from_mapping
from scalerepro.papers import files, load_paper
from tests.browser import report_problems
from tests.support import REPO
from tests.workflow.support import LAPTOP, job_counts, small_config, snakemake, workflow_copy


def test_lint_is_clean():
    proc = snakemake(REPO, "--lint")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dry_run_default_plans_every_stage(tmp_path):
    proc = snakemake(workflow_copy(tmp_path), "-n", "--cores", "2")
    assert proc.returncode == 0, proc.stderr
    counts = job_counts(proc.stdout)
    assert counts == {
        "make_dataset": 1,
        "shard": 2,
        "train": 16,
        "bench": 2,
        "cost_model": 1,
        "collect": 1,
        "simulate_validate": 1,
        "simulate_scale": 1,
        "analyze": 1,
        "plot": 1,
        "mlperf_logs": 1,
        "reproduce": 1,
        "clean_stage": 1,
        "all": 1,
        "total": 31,
    }


def test_dry_run_laptop_plans_every_method(tmp_path):
    """make run trains every algorithm where it is itself, a BN group > 1 and LARS."""
    proc = snakemake(workflow_copy(tmp_path), "-n", "-p", "--cores", "2")
    assert proc.returncode == 0, proc.stderr
    planned = set(re.findall(r"results/train/([a-z0-9-]+)/([a-z0-9-]+)/n(\d+)/g(\w+)-s\d+-r\d+/run.json", proc.stdout))
    for algo in ("native", "gloo", "ring", "rabenseifner", "multiring", "torus2d", "torus2d-3phase", "hierarchical"):
        assert ("two-nodes", algo, "4", "1") in planned, algo
    assert any(a == "multicolor" and int(n) >= 3 for _, a, n, _ in planned)
    assert any(g != "1" and v == "base" for v, _, _, g in planned)
    assert ("large-batch-lars", "ring", "4", "1") in planned
    assert ("large-batch", "ring", "4", "1") in planned
    assert "--variant large-batch-lars" in proc.stdout


def test_dry_run_without_simulation_leaves_its_rules_out(tmp_path):
    wf = workflow_copy(tmp_path)
    (wf / "nosim.yaml").write_text(yaml.safe_dump({"simulate": {"enabled": False}}))
    proc = snakemake(wf, "-n", "--cores", "2", "--configfile", "nosim.yaml")
    assert proc.returncode == 0, proc.stderr
    assert not {"simulate_validate", "simulate_scale"} & set(job_counts(proc.stdout))


def test_dry_run_on_a_machine_without_simgrid_plans_the_rest(tmp_path):
    """simulate.enabled: auto (the default) leaves the simulation out where SimGrid is missing, and says so."""
    wf = workflow_copy(tmp_path)
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "simgrid.py").write_text("raise ImportError('not installed here')\n")
    proc = snakemake(wf, "-n", "--cores", "2", PYTHONPATH=str(hide))
    assert proc.returncode == 0, proc.stderr
    counts = job_counts(proc.stdout)
    assert counts["analyze"] == 1
    assert not {"simulate_validate", "simulate_scale"} & set(counts)
    assert "apt-get install python3-simgrid" in proc.stderr


def test_dry_run_plans_the_whole_grid(tmp_path):
    wf = workflow_copy(tmp_path)
    (wf / "grid.yaml").write_text(
        yaml.safe_dump(
            {
                "train": {
                    "algorithms": ["ring", "native"],
                    "ranks": [1, 2],
                    "bn_groups": [1, "world"],
                    "seeds": [0, 7],
                    "repetitions": 2,
                    "studies": dict.fromkeys(LAPTOP["train"]["studies"]),
                }
            }
        )
    )
    proc = snakemake(wf, "-n", "-p", "--cores", "2", "--configfile", "grid.yaml")
    assert proc.returncode == 0, proc.stderr
    assert job_counts(proc.stdout)["train"] == 2 * 2 * 2 * 2 * 2
    assert "results/train/base/native/n2/gworld-s7-r1/run.json" in proc.stdout
    assert "--set train.bn_group=world --set train.seed=7 --rep 1" in proc.stdout


def test_dry_run_cluster_config_with_slurm_profile(tmp_path):
    wf = workflow_copy(tmp_path)
    proc = snakemake(wf, "-n", "-p", "--profile", "workflow/profiles/slurm", "--configfile", "config/cluster.yaml")
    assert proc.returncode == 0, proc.stderr
    counts = job_counts(proc.stdout)
    sruns = re.findall(r"srun [^\n]*?-n \d+", proc.stdout)
    assert len(sruns) == 2 * counts["train"] + counts["bench"]  # stage + train per run, one per bench
    assert all(line.startswith("srun --cpus-per-task=8 --mpi=pmi2") for line in sruns), sruns[:3]
    assert "make_dataset" not in counts  # ImageNet is an existing folder, never generated
    assert counts["train"] == 6 * 6
    assert counts["bench"] == 6
    assert "results/train/base/ring/n256/g1-s0-r0/run.json" in proc.stdout
    assert "results/train/base/nccl/n8/g1-s0-r0/run.json" in proc.stdout
    assert "results/train/base/torus2d/n64/g1-s0-r0/run.json" in proc.stdout
    gres = {
        rule: set(re.findall(rf"rule {rule}:\n(?:    .*\n)*?    resources: .*?gres=([^,\n]*)", proc.stdout))
        for rule in ("train", "bench")
    }
    assert gres == {"train": {"gpu:8"}, "bench": {""}}  # the bench sums host buffers: it asks for no GPU


def test_dry_run_shards_on_many_cpus_within_the_measured_projection(tmp_path, tiny_dataset):
    """Each split's shard job asks for cluster.shard_cpus CPUs and a time limit above the
    projection for ILSVRC-2012 from the packing rate measured here (by bytes and by images, the larger)."""
    from scalerepro.data.pack import shard_split

    wf = workflow_copy(tmp_path)
    proc = snakemake(wf, "-n", "-p", "--profile", "workflow/profiles/slurm", "--configfile", "config/cluster.yaml")
    assert proc.returncode == 0, proc.stderr
    plans = re.findall(r"rule shard:\n(?:    .*\n)*?    resources: (.*)", proc.stdout)
    assert len(plans) == 2
    cluster = yaml.safe_load((REPO / "config" / "cluster.yaml").read_text())["cluster"]
    projection = shard_split(tiny_dataset, "train", tmp_path / "shards", 4, 0, threads=2)["rate"]["projection"]
    assert projection["cpus"] == cluster["shard_cpus"] > 1
    for resources in plans:
        assert f"cpus_per_task={cluster['shard_cpus']}" in resources
        assert f"runtime={cluster['shard_runtime_min']}" in resources
    assert cluster["shard_runtime_min"] >= 2 * projection["minutes"], projection  # room for reading the sources


FACT_REF = re.compile(r"\b([a-z][a-z0-9.-]*[a-z0-9])#([a-z0-9][a-z0-9-]*)")
PAPERS = {path.stem: load_paper(path) for path in files(REPO / "config" / "papers")}


def preset_algorithms(preset: dict) -> set[str]:
    """The algorithms a preset trains with: its grid's and its studies'."""
    train = preset["train"]
    return {*train["algorithms"], *(a for study in (train.get("studies") or {}).values() for a in study["algorithms"])}


@pytest.mark.parametrize("paper", sorted(PAPERS))
def test_paper_preset_validates_and_plans_with_the_slurm_profile(tmp_path, paper):
    """Each paper's preset (config/papers/<id>.yaml names it) over cluster.yaml: valid, every value citing a
    registered fact or saying 'assumed', every cited fact in config/sources.yaml, its algorithms planned."""
    preset = PAPERS[paper].preset.relative_to(REPO)
    text = (REPO / preset).read_text()
    registry = sources.load_registry(REPO / "config" / "sources.yaml")
    values = [line for line in text.splitlines() if ": " in line and not line.lstrip().startswith("#")]
    comments = [line.partition(" # ")[2] for line in values if not line.rstrip().endswith(":")]
    uncited = [c for c in comments if not FACT_REF.search(c) and "assumed" not in c]
    assert not uncited, f"values without a registered source or 'assumed': {uncited}"
    for comment in comments:
        for ref in FACT_REF.findall(comment):
            registry.fact("#".join(ref), str(preset))  # an unknown fact raises
    merged = copy.deepcopy(LAPTOP)
    for layer in ("config/cluster.yaml", preset):
        update_config(merged, yaml.safe_load((REPO / layer).read_text()))
    from_mapping(merged)
    wf = workflow_copy(tmp_path)
    proc = snakemake(
        wf,
        "-n",
        "--profile",
        "workflow/profiles/slurm",
        "--configfile",
        "config/cluster.yaml",
        str(preset),
    )
    assert proc.returncode == 0, proc.stderr
    planned = set(re.findall(r"results/train/[a-z0-9-]+/([a-z0-9-]+)/n\d+/", proc.stdout))
    assert planned == preset_algorithms(yaml.safe_load(text))


def test_slurm_profile_launches_ranks_with_srun():
    profile = yaml.safe_load((REPO / "workflow/profiles/slurm/profile.yaml").read_text())
    assert profile["executor"] == "slurm"
    assert profile["slurm-status-command"] == "squeue"
    assert profile["set-resources"]["train"]["launcher"] == "srun --mpi=pmi2"
    assert profile["set-resources"]["bench"]["launcher"] == "srun --mpi=pmi2"


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ({"train": {"epochs": 0}}, "train.epochs"),
        ({"bench": {"algorithms": ["ring", "carrier-pigeon"]}}, "bench.algorithms.1"),
        ({"stage": {"where": "/tmp"}}, "stage.where: unknown key"),
        ({"train": {"ranks": [1, 2], "bn_groups": [1, 2]}}, "train.bn_groups: 2 does not divide train.ranks [1]"),
        ({"train": {"ranks": [8, 12]}, "cluster": {"tasks_per_node": 8}}, "not multiples of cluster.tasks_per_node"),
        ({"train": {"algorithms": ["ring", "telepathy"]}}, "train.algorithms.1: 'telepathy' is not one of"),
        (
            {"train": {"ranks": [1, 2], "algorithms": ["multiring"]}, "comm": {"grid": [2, 2]}},
            "comm.grid [2, 2] holds 4 ranks, but train.ranks has [1, 2]",
        ),
    ],
)
@pytest.mark.faults
def test_bad_config_fails_before_any_job(tmp_path, bad, named):
    wf = workflow_copy(tmp_path)
    (wf / "bad.yaml").write_text(yaml.safe_dump(bad))
    proc = snakemake(wf, "--cores", "1", "--configfile", "bad.yaml")
    assert proc.returncode != 0
    assert named in proc.stderr + proc.stdout
    assert not (wf / "results").exists()
    assert not (wf / "data").exists()


@pytest.mark.slow
def _report_reads_in_a_browser(report, profile, claims_simulated):
    """Every figure and the Reproduction page of ``report`` show in headless chromium, with no error, each figure
    with its caption."""
    shown, errors = report_problems(report, profile)
    assert errors == []
    assert set(shown["figures"]) == {f"results/plots/{name}" for name in FIGURES}
    for path, size in shown["figures"].items():
        assert isinstance(size, list), (path, size)  # else what the browser said of it
        assert min(size) > 100, (path, size)  # decoded, not a broken-image icon
    for path, caption in shown["captions"].items():
        assert "Where the numbers come from" in caption or "Measured here" in caption, path
    page = shown["pages"]["results/reproduction.html"]
    assert page["shown"]
    assert page["tables"] == 3
    assert page["rows"] >= claims_simulated
    assert "verdict" in page["header"]


def test_laptop_run_end_to_end(tmp_path):
    """make run's two commands on a reduced dataset: every stage, metrics, figures, report; a rerun does nothing."""
    wf = workflow_copy(tmp_path)
    (wf / "small.yaml").write_text(yaml.safe_dump(small_config(tmp_path)))
    run = snakemake(
        wf, "--cores", "2", "--profile", "workflow/profiles/laptop", "--configfile", "small.yaml", timeout=900
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    metrics = json.loads((wf / "results/metrics.json").read_text())
    assert set(metrics["runs"]) == {"ring-n1-g1-s0-r0", "ring-n2-g1-s0-r0"}
    cleaned = json.loads((wf / "results/stage_clean.json").read_text())
    assert cleaned["kept"] is True
    assert list((tmp_path / "shm").glob("*/*/train"))
    assert metrics["runs"]["ring-n2-g1-s0-r0"]["images_per_s"] > 0
    assert metrics["summary"]["bench_wrong"] == 0
    assert set(metrics["bench_peak_busbw_GBps"]) == {f"{a}-n2" for a in LAPTOP["bench"]["algorithms"]}
    bench = json.loads((wf / "results/bench/n2.json").read_text())
    assert {c["peer"] for c in bench["comparisons"]} == {"native", "gloo"}
    costmodel = json.loads((wf / "results/analysis/costmodel.json").read_text())
    assert {f["algorithm"] for f in costmodel["fits"]} == set(LAPTOP["bench"]["algorithms"])
    validation = (wf / "results/simulation/validation.csv").read_text().splitlines()
    assert validation[0].startswith("algorithm,modelled_as,ranks,bytes")
    assert len(validation) > 20
    assert "this-machine" in validation[1]
    scale = (wf / "results/analysis/simulated.csv").read_text()
    assert "minsky-ddl,multicolor,8,float32" in scale
    assert "bfloat16" not in scale  # the laptop grid simulates float32 only (simulate.dtypes)
    assert "simulated: ring on minsky-ddl (float32)" in (wf / "results/analysis/comparison.csv").read_text()
    with (wf / "results/analysis/papers.csv").open(newline="") as f:
        papers = list(csv.DictReader(f))
    assert [p["paper"] for p in papers].count("Kumar et al. 2017") == 5
    assert len(papers) == 8
    assert {p["verdict"] for p in papers} == {"not simulated"}  # every claim is above claims_max_ranks 8 here
    with (wf / "results/analysis/simulated.csv").open(newline="") as f:
        for row in csv.DictReader(f):  # the grid's bands (rate and overlap: simulate.corners is off)
            assert float(row["images_per_s_low"]) <= float(row["images_per_s"]) <= float(row["images_per_s_high"])
    assert (wf / "results/analysis/sensitivity.csv").is_file()
    for fig in FIGURES:  # workflow/rules/common.smk's list (the report's test below holds the two equal)
        assert (wf / "results/plots" / fig).stat().st_size > 10_000
        assert (wf / "results/plots" / fig).with_suffix(".svg").read_text().lstrip().startswith("<?xml")
    assert (wf / "results/mlperf/ring-n2-g1-s0-r0.txt").read_text().startswith(":::MLLOG ")
    cards = (wf / "results/reproduction.md").read_text()
    assert cards.count("\n## ") == 3
    assert "| a multi-color MPI Allreduce cuts the communication overhead" in cards
    assert "Judged as the paper's all-reduce: `multicolor`, colored k-ary trees" in cards
    assert "What this run can establish" in cards
    kumar = json.loads((wf / "results/reproduction.json").read_text())["Kumar et al. 2017"]
    assert kumar["kumar-multicolor"]["verdict"].startswith(("indicative only", "not measurable here"))
    for log in (
        "make_dataset.log",
        "shard_train.log",
        "train/base/ring-n2-g1-s0-r0.log",
        "bench/n2.log",
        "plot.log",
        "mlperf_logs.log",
        "simulate_validate.log",
        "simulate_scale.log",
        "reproduce.log",
    ):
        assert (wf / "results/logs" / log).is_file(), log
    stage = json.loads((wf / "results/train/base/ring/n2/g1-s0-r0/stage.json").read_text())
    assert stage["world_size"] == 1  # one staging process per node
    assert stage["nodes"][0]["splits"][0]["copied"] + stage["nodes"][0]["splits"][0]["already_present"] == 4
    report = snakemake(wf, "--configfile", "small.yaml", "--report", "results/report.html", timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    assert (wf / "results/report.html").stat().st_size > 100_000
    _report_reads_in_a_browser(wf / "results/report.html", tmp_path / "browser", len(papers))
    again = snakemake(wf, "-n", "--cores", "2", "--configfile", "small.yaml")
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr
