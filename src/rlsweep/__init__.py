"""rlsweep: measure which PyTorch optimizations pay for small RL models, as Hydra sweeps."""

__version__ = "0.1.0"
