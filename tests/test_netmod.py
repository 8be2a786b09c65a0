"""MPICH's network module under srun --mpi=pmi2: OFI, chosen before MPI starts, never overriding the user."""

from __future__ import annotations

import os

import pytest

from scalerepro import cli
from scalerepro.netmod import NETMOD, choose_netmod, netmod_env, under_slurm_pmi2

PMI2_TASK = {"SLURM_MPI_TYPE": "pmi2", "PMI_FD": "11", "PMI_RANK": "0", "PMI_SIZE": "4"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (PMI2_TASK, True),
        ({"SLURM_MPI_TYPE": "pmi2"}, False),  # the job script itself, not a task srun started
        ({**PMI2_TASK, "SLURM_MPI_TYPE": "pmix"}, False),
        ({"PMI_FD": "5", "PMI_RANK": "0"}, False),  # Hydra's mpiexec
        ({}, False),
    ],
)
def test_only_tasks_of_srun_mpi_pmi2_are_recognised(env, expected):
    assert under_slurm_pmi2(env) is expected


def test_srun_pmi2_tasks_get_ofi():
    assert netmod_env(PMI2_TASK) == {NETMOD: "ofi"}


def test_the_users_netmod_wins():
    assert netmod_env({**PMI2_TASK, NETMOD: "ucx"}) == {}


def test_elsewhere_nothing_is_set():
    assert netmod_env({"MPI_LOCALNRANKS": "4", "PMI_FD": "5"}) == {}


def test_choose_updates_the_environment_it_is_given():
    env = dict(PMI2_TASK)
    assert choose_netmod(env) == {NETMOD: "ofi"}
    assert env == {**PMI2_TASK, NETMOD: "ofi"}


def test_the_cli_chooses_before_any_command_runs(tmp_path, monkeypatch):
    """``scalerepro <command>`` in an srun --mpi=pmi2 task sets the netmod before the command (which may start MPI)
    runs; the command here is a stand-in that records what it saw (a real one would start MPI against PMI_FD)."""
    for key, value in PMI2_TASK.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(NETMOD, "")
    monkeypatch.delenv(NETMOD)  # absent now; monkeypatch removes what the CLI sets after the test
    seen: dict[str, str | None] = {}
    monkeypatch.setattr(cli.module("collect"), "command", lambda _args: seen.update(netmod=os.environ.get(NETMOD)))
    assert cli.main(["collect", "--out", str(tmp_path)]) == 0
    assert seen == {"netmod": "ofi"}
