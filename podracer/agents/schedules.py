"""Learning-rate schedules of the agents' optimizers."""

from __future__ import annotations

import jax.numpy as jnp
import optax

from podracer.types import Array


def learning_rate(lr: float, anneal: bool, num_steps: int) -> float | optax.Schedule:
    """`lr`, or with `anneal` a linear decay from `lr` to 0 over `num_steps` optimizer steps
    that is exactly 0 from step `num_steps` on: `lr * max(N - count, 0) / N`, with the
    difference taken in integers (optax's `1 - count / N` can leave a step of one ulp)."""
    if not anneal:
        return lr
    n = max(1, int(num_steps))

    def schedule(count: Array) -> Array:
        remaining = jnp.maximum(n - count, 0).astype(jnp.float32)
        return lr * remaining / n

    return schedule
