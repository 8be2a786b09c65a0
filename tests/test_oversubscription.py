"""MPI yield settings: chosen from the launcher's rank count and the node's cores, never overriding the user."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scalerepro import cli
from scalerepro.errors import UserError
from scalerepro.oversubscription import (
    SWITCH,
    YIELD_SETTINGS,
    launch_env,
    local_ranks,
    node_cores,
    tune,
    yield_env,
)


@pytest.mark.parametrize(
    ("env", "ranks"),
    [
        ({}, 1),
        ({"MPI_LOCALNRANKS": "4"}, 4),
        ({"OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, 3),
        ({"SLURM_STEP_TASKS_PER_NODE": "4(x2),3"}, 4),
        ({"SLURM_TASKS_PER_NODE": "8"}, 8),
        ({"MPI_LOCALNRANKS": "2", "SLURM_TASKS_PER_NODE": "8"}, 2),
    ],
)
def test_local_ranks_from_each_launcher(env, ranks):
    assert local_ranks(env) == ranks


def test_node_cores_prefers_the_slurm_allocation():
    assert node_cores({"SLURM_CPUS_ON_NODE": "6"}) == 6
    assert node_cores({}) >= 1


def test_oversubscribed_node_gets_every_setting():
    assert yield_env({"MPI_LOCALNRANKS": "4"}, cores=2) == YIELD_SETTINGS


@pytest.mark.parametrize("ranks", ["1", "2"])
def test_a_rank_per_core_keeps_mpich_defaults(ranks):
    assert yield_env({"MPI_LOCALNRANKS": ranks}, cores=2) == {}


def test_settings_the_user_made_win():
    env = {"MPI_LOCALNRANKS": "4", "MPIR_CVAR_POLLS_BEFORE_YIELD": "1000"}
    added = yield_env(env, cores=2)
    assert "MPIR_CVAR_POLLS_BEFORE_YIELD" not in added
    assert set(added) == set(YIELD_SETTINGS) - {"MPIR_CVAR_POLLS_BEFORE_YIELD"}


def test_switch_forces_or_disables():
    assert yield_env({SWITCH: "1"}, cores=64) == YIELD_SETTINGS
    assert yield_env({SWITCH: "0", "MPI_LOCALNRANKS": "8"}, cores=2) == {}


def test_bad_switch_names_the_variable_and_the_choices():
    with pytest.raises(UserError, match=r"SCALEREPRO_MPI_YIELD='yes'.*1 \(yield\), 0"):
        yield_env({SWITCH: "yes"}, cores=2)


def test_tune_updates_the_environment_it_is_given():
    env = {"MPI_LOCALNRANKS": "64"}
    added = tune(env)
    assert added == YIELD_SETTINGS
    assert env == {"MPI_LOCALNRANKS": "64", **YIELD_SETTINGS}


def test_importing_the_package_leaves_the_environment_alone():
    """``import scalerepro`` (and every subpackage) changes no environment variable, even when oversubscribed."""
    probe = (
        "import os; e = dict(os.environ); import scalerepro, scalerepro.cli, scalerepro.comm, scalerepro.data, "
        "scalerepro.sim, scalerepro.train, scalerepro.analysis; assert dict(os.environ) == e, "
        "set(os.environ.items()) ^ set(e.items())"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MPIR_CVAR")} | {"MPI_LOCALNRANKS": "4096"}
    subprocess.run([sys.executable, "-c", probe], env=env, check=True)


def test_the_cli_sets_them_before_any_command_runs(tmp_path, monkeypatch, capsys):
    """``scalerepro <command>`` applies the settings before the command (which may start MPI) runs."""
    monkeypatch.setenv("MPI_LOCALNRANKS", "4096")
    monkeypatch.delenv(SWITCH, raising=False)
    for key in YIELD_SETTINGS:  # set, then removed: monkeypatch restores them (absent) after the test
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    assert cli.main(["cost-model", "--bench", str(tmp_path / "none.json"), "--out", str(tmp_path / "o.json")]) == 2
    assert "no bench JSON matches" in capsys.readouterr().err
    assert {k: os.environ.get(k) for k in YIELD_SETTINGS} == YIELD_SETTINGS


def test_launch_env_adds_them_for_more_ranks_than_cores():
    base = {k: v for k, v in os.environ.items() if not k.startswith("MPIR_CVAR") and k != SWITCH}
    assert launch_env(node_cores(base) + 1, base) == {**base, **YIELD_SETTINGS}
    assert launch_env(1, base) == base


@pytest.mark.mpi
def test_mpiexec_ranks_are_counted(run_mpi):
    """Hydra's MPI_LOCALNRANKS is read: 3 ranks get the settings exactly when the node has fewer than 3 cores."""
    probe = (
        "import os; from scalerepro.oversubscription import tune; tune(); from mpi4py import MPI; "
        "seen = MPI.COMM_WORLD.gather(os.environ.get('MPIR_CVAR_POLLS_BEFORE_YIELD', '-')); "
        "MPI.COMM_WORLD.rank == 0 and print(*seen)"
    )
    if "MPIR_CVAR_POLLS_BEFORE_YIELD" in os.environ:
        pytest.skip("MPIR_CVAR_POLLS_BEFORE_YIELD is set in this environment, and the user's setting wins")
    out = run_mpi(3, ["-c", probe], env={SWITCH: "auto"}).stdout.split()
    expected = "1" if node_cores(os.environ) < 3 else "-"
    assert out == [expected] * 3
