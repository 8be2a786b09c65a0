"""scalerepro: reproduce large-scale synchronous data-parallel ImageNet training experiments.

Importing the package has no side effects: MPI's progress settings are applied by
:func:`scalerepro.oversubscription.tune`, which the CLI calls before MPI starts.
"""

__version__ = "0.1.0"
