"""The workflow on a real single-node SLURM cluster (Debian's slurmctld, slurmd, munge), end to end."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from tests.conftest import REPO
from tests.workflow.test_workflow import small_config, snakemake, workflow_copy

SCRIPT = REPO / "scripts" / "local-slurm.sh"


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """Start munged, slurmctld and slurmd for this module; stop what was started afterwards."""
    if os.geteuid() != 0:
        pytest.skip("starting SLURM daemons needs root (CI runs as root)")
    state = tmp_path_factory.mktemp("slurm")
    try:
        up = subprocess.run(["bash", str(SCRIPT), "up", str(state)], capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stderr
        yield state
    finally:
        subprocess.run(["bash", str(SCRIPT), "down", str(state)], capture_output=True, text=True, timeout=60)


def scontrol_job(job_id: str) -> str:
    """`scontrol show job` of a finished job (the controller keeps it for MinJobAge, 300 s)."""
    return subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30).stdout


@pytest.mark.slow
@pytest.mark.slurm
def test_workflow_runs_on_slurm_with_srun_inside_the_allocation(slurm_cluster, tmp_path):
    wf = workflow_copy(tmp_path)
    small = small_config(tmp_path) | {"cluster": {"tasks_per_node": 2, "cpus_per_task": 1, "mem_mb_per_cpu": 2000,
                                                  "train_runtime_min": 20, "bench_runtime_min": 10}}
    (wf / "small.yaml").write_text(yaml.safe_dump(small))
    run = snakemake(wf, "--profile", "workflow/profiles/slurm", "--configfile", "small.yaml",
                    "--slurm-init-seconds-before-status-checks", "1", "--latency-wait", "5",
                    "--slurm-keep-successful-logs", timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]

    record = json.loads((wf / "results/train/base/ring/n2/g1-s0-r0/run.json").read_text())
    assert record["world_size"] == 2 and record["status"] in ("success", "aborted")
    assert record["slurm"]["job_id"] and "step_id" in record["slurm"]  # a job step: srun launched the ranks
    stage = json.loads((wf / "results/train/base/ring/n2/g1-s0-r0/stage.json").read_text())
    assert stage["world_size"] == 2 and len(stage["nodes"]) == 1
    assert json.loads((wf / "results/metrics.json").read_text())["runs"]
    assert (wf / "results/plots/scaling.png").is_file()

    job_log = next((wf / ".snakemake/slurm_logs/rule_train").glob("*ring_2*/*.log"))
    job = scontrol_job(job_log.stem)
    assert "NumTasks=2" in job and "NtasksPerN:B:S:C=2:" in job and "CPUs/Task=1" in job, job
    assert "TimeLimit=00:20:00" in job
    queue = subprocess.run(["squeue", "-h"], capture_output=True, text=True, timeout=30).stdout
    assert queue.strip() == ""  # nothing left behind

    again = snakemake(wf, "-n", "--profile", "workflow/profiles/slurm", "--configfile", "small.yaml")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
