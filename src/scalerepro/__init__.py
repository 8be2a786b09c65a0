"""scalerepro: reproduce large-scale synchronous data-parallel ImageNet training experiments.

Importing the package has no side effects: MPI's environment (progress settings, the network
module under SLURM's PMI-2, emulated nodes), MPI itself and torch's process group are set up by
:mod:`scalerepro.distributed`, in that order, where the CLI calls it.
"""

__version__ = "0.1.0"
