"""scalerepro: reproduce large-scale synchronous data-parallel ImageNet training experiments."""

from scalerepro.oversubscription import tune as _tune_mpi_progress

__version__ = "0.1.0"

# Before any submodule imports mpi4py.MPI (MPI reads its settings once, at initialisation).
_tune_mpi_progress()
