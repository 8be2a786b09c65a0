"""The workflow on a real two-node SLURM cluster (Debian's slurmctld, munge, and two slurmd on this one host),
end to end."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests.support import REPO
from tests.train.test_checkpoint import final_state, mid_epoch
from tests.workflow.support import small_config, snakemake, snakemake_background, wait_for, workflow_copy

SCRIPT = REPO / "scripts" / "local-slurm.sh"


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """Start munged, slurmctld and two slurmd (nodes n1, n2) for this module; stop what was started afterwards."""
    if os.geteuid() != 0:
        pytest.skip("starting SLURM daemons needs root (CI runs as root)")
    state = tmp_path_factory.mktemp("slurm")
    try:
        up = subprocess.run(
            ["bash", str(SCRIPT), "up", str(state), "--nodes", "2"], capture_output=True, text=True, timeout=300
        )
        assert up.returncode == 0, up.stderr
        yield state
    finally:
        subprocess.run(["bash", str(SCRIPT), "down", str(state)], capture_output=True, text=True, timeout=60)


# The SLURM profile with the test cluster's short status waits; after any targets (--configfile takes every
# word after it that is not an option).
SLURM_PROFILE = (
    "--profile",
    "workflow/profiles/slurm",
    "--configfile",
    "small.yaml",
    "--slurm-init-seconds-before-status-checks",
    "1",
    "--latency-wait",
    "5",
)
TWO_BY_TWO = {  # two tasks per node, sized for the test cluster (2 CPUs per node)
    "tasks_per_node": 2,
    "cpus_per_task": 1,
    "mem_mb_per_cpu": 2000,
    "train_runtime_min": 20,
    "bench_runtime_min": 10,
    "shard_cpus": 2,
    "shard_runtime_min": 10,
}


def log_tails(wf: Path, chars: int = 1500) -> str:
    """The end of every rule log and SLURM job log of the workflow, for a failure message."""
    logs = sorted([*(wf / "results/logs").rglob("*.log"), *(wf / ".snakemake/slurm_logs").rglob("*.log")])
    return "\n".join(f"== {p.relative_to(wf)}\n{p.read_text(errors='replace')[-chars:]}" for p in logs)


def scontrol_job(job_id: str) -> str:
    """`scontrol show job` of a finished job (the controller keeps it for MinJobAge, 300 s)."""
    return subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30).stdout


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.usefixtures("slurm_cluster")
def test_workflow_runs_on_two_slurm_nodes_with_srun_inside_the_allocation(tmp_path):
    """Ring at 1 and 2 ranks on one node, hierarchical at 4 ranks as 2 nodes x 2 tasks (staged once
    per node, each node its own shards in its own folder), then the sweep's staged shards removed on both nodes."""
    wf = workflow_copy(tmp_path)
    small = small_config(tmp_path)
    small["train"]["studies"]["nodes"] = {"ranks": [4], "algorithms": ["hierarchical"]}
    small |= {"cluster": TWO_BY_TWO}
    (wf / "small.yaml").write_text(yaml.safe_dump(small))
    try:
        run = snakemake(wf, *SLURM_PROFILE, "--slurm-keep-successful-logs", timeout=1200)
    except subprocess.TimeoutExpired:
        queue = subprocess.run(["squeue"], capture_output=True, text=True, timeout=30).stdout
        pytest.fail(f"the SLURM workflow did not finish in 1200 s; squeue:\n{queue}\n{log_tails(wf)}")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]

    record = json.loads((wf / "results/train/base/ring/n2/g1-s0-r0/run.json").read_text())
    assert record["world_size"] == 2
    assert record["status"] in ("success", "aborted")
    assert record["slurm"]["job_id"]
    assert "step_id" in record["slurm"]
    stage = json.loads((wf / "results/train/base/ring/n2/g1-s0-r0/stage.json").read_text())
    assert stage["world_size"] == 1  # one staging process per node
    assert len(stage["nodes"]) == 1
    assert json.loads((wf / "results/metrics.json").read_text())["runs"]

    two = wf / "results/train/base/hierarchical/n4/g1-s0-r0"
    record = json.loads((two / "run.json").read_text())
    assert record["nodes"] == [{"node": 0, "name": "n1", "ranks": [0, 1]}, {"node": 1, "name": "n2", "ranks": [2, 3]}]
    assert {"nodes": 2, "ranks_per_node": 2}.items() <= record["allreduce"][0].items(), record["allreduce"]
    assert record["status"] in ("success", "aborted")  # aborted: 2 epochs do not reach the target
    assert record["mpi_env"]["MPIR_CVAR_CH4_NETMOD"] == "ofi"  # srun --mpi=pmi2 across nodes: OFI, not UCX
    staged = json.loads((two / "stage.json").read_text())
    assert staged["world_size"] == 2  # srun --ntasks-per-node=1: one staging process on each node
    by_name = {n["name"]: {s["split"]: s for s in n["splits"]} for n in staged["nodes"]}
    assert sorted(by_name) == ["n1", "n2"]  # once per node, by SLURM's node name (one host here)
    assert by_name["n1"]["train"]["shards"] == ["shard-00000.srs", "shard-00002.srs"]
    assert by_name["n2"]["train"]["shards"] == ["shard-00001.srs", "shard-00003.srs"]
    assert by_name["n1"]["train"]["dest"].startswith(str(tmp_path / "shm" / "n1"))
    assert by_name["n2"]["train"]["dest"].startswith(str(tmp_path / "shm" / "n2"))

    cleaned = json.loads((wf / "results/stage_clean.json").read_text())  # under SLURM the sweep's end cleans
    assert cleaned["kept"] is False, cleaned
    assert not cleaned["failed"], cleaned
    assert sorted(cleaned["staged"][str(tmp_path / "shm")]) == ["n1", "n2"]
    assert not list((tmp_path / "shm").glob("*/*")), list((tmp_path / "shm").rglob("*"))
    assert (wf / "results/plots/scaling.png").is_file()

    job_log = next((wf / ".snakemake/slurm_logs/rule_train").glob("*ring_2*/*.log"))
    job = scontrol_job(job_log.stem)
    for field in ("NumTasks=2", "NtasksPerN:B:S:C=2:", "CPUs/Task=1"):
        assert field in job, job
    assert "TimeLimit=00:20:00" in job
    queue = subprocess.run(["squeue", "-h"], capture_output=True, text=True, timeout=30).stdout
    assert queue.strip() == ""  # nothing left behind

    again = snakemake(wf, "-n", "--profile", "workflow/profiles/slurm", "--configfile", "small.yaml")
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr


def slurm_workflow(wf: Path, *targets: str, background: bool = False) -> Any:
    """The SLURM profile on ``targets`` (targets first: see SLURM_PROFILE), to the end or in the background."""
    if background:
        return snakemake_background(wf, *targets, *SLURM_PROFILE)
    return snakemake(wf, *targets, *SLURM_PROFILE, timeout=900)


def node_state(name: str) -> str:
    """The node's state as `sinfo` prints it (idle, alloc, down*, ...)."""
    return subprocess.run(
        ["sinfo", "-h", "-N", "-n", name, "-o", "%T"], capture_output=True, text=True, timeout=30
    ).stdout.strip()


def lose_node(state: Path, name: str, ranks: list[dict[str, Any]]) -> None:
    """What a node that dies takes with it: its slurmd, its job steps' slurmstepd, and its ranks (SIGKILL)."""
    victims = [p["pid"] for p in ranks if p["node"] == name]
    steps = {int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) for pid in victims}
    slurmd = int((state / f"slurmd.{name}.pid").read_text())
    for pid in [slurmd, *steps, *victims]:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.faults
def test_a_node_lost_mid_run_is_named_and_the_retry_resumes_to_the_uninterrupted_parameters(slurm_cluster, tmp_path):
    """A 2 x 2 run loses node n2 mid-run (its slurmd, slurmstepd and ranks killed): the job's failure names n2
    within comm.timeout_s, the profile's retry waits for the node to return and resumes from the last
    checkpoint, and the run ends with the parameters of an uninterrupted one, bit for bit (repetitions r0 and
    r1 compute the same run; r1 runs first, whole)."""
    wf = workflow_copy(tmp_path)
    small = small_config(tmp_path)
    small["train"].update(ranks=[4], repetitions=2, epochs=4, batch_per_rank=8, checkpoint_every=1)
    small["comm"] = {"timeout_s": 20}
    small["cluster"] = TWO_BY_TWO
    (wf / "small.yaml").write_text(yaml.safe_dump(small))
    whole, cut = (wf / f"results/train/base/ring/n4/g1-s0-r{k}" for k in (1, 0))

    reference = slurm_workflow(wf, f"{whole.relative_to(wf)}/run.json")
    assert reference.returncode == 0, reference.stdout[-3000:] + reference.stderr[-3000:] + log_tails(wf)

    proc = slurm_workflow(wf, f"{cut.relative_to(wf)}/run.json", background=True)
    wait_for(proc, lambda: mid_epoch(cut), "the run's second epoch", limit_s=600)
    ranks = json.loads((cut / "ranks.json").read_text())["ranks"]
    assert {p["node"] for p in ranks} == {"n1", "n2"}, ranks
    attempts = cut / "attempts.log"
    before = attempts.stat().st_size
    lose_node(slurm_cluster, "n2", ranks)
    lost = time.monotonic()

    def named() -> list[str]:
        with attempts.open() as f:
            f.seek(before)
            return [line for line in f if "error" in line and "n2" in line]

    wait_for(proc, lambda: bool(named()), "an error naming n2", limit_s=60)
    reported = time.monotonic() - lost
    wait_for(proc, lambda: node_state("n2").startswith("down"), "n2 marked down by the controller", 120)
    subprocess.run(
        ["slurmd", "-f", str(slurm_cluster / "slurm.conf"), "-N", "n2"], check=True, timeout=60
    )  # the node comes back (ReturnToService=2)
    output, _ = proc.communicate(timeout=900)
    finished = time.monotonic() - lost
    print(f"node lost: {named()[0].strip()!r} after {reported:.1f} s; the retry finished {finished:.1f} s after")
    assert proc.returncode == 0, output[-4000:] + log_tails(wf)
    # at worst the collective's deadline, then the watchdog's 2-s survey of the peers and the abort's half
    # second; srun may see the lost step first, and then the supervisor names the rank's node
    assert reported <= small["comm"]["timeout_s"] + 4, attempts.read_text()[-3000:]
    assert re.search(r"on (node )?n2\b", "".join(named())), named()

    log = attempts.read_text()
    assert log.count("== train job on ") == 2, log[-4000:]
    record = json.loads((cut / "run.json").read_text())
    assert record["resumed"]
    a, b = final_state(whole), final_state(cut)
    assert a["progress"]["step"] == b["progress"]["step"]
    assert a["progress"]["evals"] == b["progress"]["evals"]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
