"""Policy-gradient losses."""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def categorical_log_prob(logits: Array, action: Array) -> Array:
    """`log pi(a|s)` for logits `[..., A]` and integer actions `[...]`."""
    log_probs = jax.nn.log_softmax(logits)
    return jnp.take_along_axis(log_probs, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def entropy_loss(logits: Array) -> Array:
    """Negative mean entropy of categorical policies with logits `[..., A]`."""
    log_probs = jax.nn.log_softmax(logits)
    return jnp.mean(jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1))


def clipped_surrogate_loss(
    log_ratio: Array, advantages: Array, epsilon: float | Array
) -> Array:
    """PPO's clipped surrogate objective as a loss (Schulman et al. 2017, eq. 7).

    log_ratio:  `log pi(a|s) - log mu(a|s)`, `[N]`.
    advantages: `[N]`.
    Returns the scalar `-mean(min(rho * A, clip(rho, 1 - eps, 1 + eps) * A))`.
    """
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon) * advantages
    return -jnp.mean(jnp.minimum(unclipped, clipped))
