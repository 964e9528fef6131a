"""16-bit optimizers (seed 004): SGD and AdamW on BF16 weights and states with nearest, reproducible stochastic,
or Kahan-compensated weight updates, fused into multi-tensor CUDA kernels that match `reference` bit for bit."""

from .optimizers import SGD, AdamW

__all__ = ["SGD", "AdamW"]
