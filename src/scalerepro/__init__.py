"""scalerepro: reproduce large-scale synchronous data-parallel ImageNet training experiments."""

__version__ = "0.1.0"
