"""Diagonal Gaussian policies: log-probabilities, entropy and sampling.

The event is the last `event_ndim` axes (an action `[..., *shape]` with
`event_ndim = len(shape)`); everything before is batch. `log_std` broadcasts against
`mean` (a state-independent log-std is one `[*shape]` vector for every state).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

Array = jax.Array

_LOG_2PI = math.log(2.0 * math.pi)


def _sum_event(x: Array, event_ndim: int) -> Array:
    return jnp.sum(x, axis=tuple(range(x.ndim - event_ndim, x.ndim))) if event_ndim else x


def gaussian_log_prob(mean: Array, log_std: Array, action: Array, event_ndim: int = 1) -> Array:
    """`log N(action; mean, diag(exp(log_std)^2))`, summed over the event axes.

    mean, action: `[..., *shape]`; log_std broadcastable to them. Returns `[...]`.
    """
    log_std = jnp.broadcast_to(log_std, mean.shape)
    z = (action - mean) * jnp.exp(-log_std)
    return _sum_event(-0.5 * jnp.square(z) - log_std - 0.5 * _LOG_2PI, event_ndim)


def gaussian_entropy(mean: Array, log_std: Array, event_ndim: int = 1) -> Array:
    """Entropy of the diagonal Gaussian, `sum(log_std + 0.5 * log(2 pi e))` over the event
    axes: `[...]` (the batch shape of `mean`)."""
    log_std = jnp.broadcast_to(log_std, mean.shape)
    return _sum_event(log_std + 0.5 * (_LOG_2PI + 1.0), event_ndim)


def gaussian_sample(key: jax.Array, mean: Array, log_std: Array) -> Array:
    """One sample `mean + exp(log_std) * eps`, `eps ~ N(0, I)`, shaped like `mean`."""
    return mean + jnp.exp(jnp.broadcast_to(log_std, mean.shape)) * jax.random.normal(key, mean.shape, mean.dtype)
