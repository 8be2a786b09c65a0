"""scalerepro: reproduce large-scale synchronous data-parallel ImageNet training experiments.

Importing the package has no side effects: MPI's progress settings are applied by
:func:`scalerepro.oversubscription.tune`, and the network module under SLURM's PMI-2 by
:func:`scalerepro.netmod.choose`; the CLI calls both before MPI starts.
"""

__version__ = "0.1.0"
