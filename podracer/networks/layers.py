"""What every network of podracer builds with: the orthogonal initializer and the
activations a config names."""

from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import numpy as np

# The activations `agent.activation` may name.
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu}


def orthogonal(scale: float = np.sqrt(2.0)) -> nn.initializers.Initializer:
    """The orthogonal initializer of gain `scale` (sqrt 2 for ReLU layers, Saxe et al. 2014).

    Args:
        scale: the gain.

    Returns:
        A flax initializer.
    """
    return nn.initializers.orthogonal(scale)
