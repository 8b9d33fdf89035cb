"""Running mean and variance, merged batch by batch (Chan et al. 1979's parallel form).

`RunningStats` is a pytree of float32 arrays (`count` too, so that it never overflows;
its rounding only matters past 2^24 samples, and then only to the merge weights).
`update` folds one batch into it; with an `axis_name` the batch is the union of every
device's batch and every device ends with the same statistics: each device's moments are
averaged over the mesh (every device holds an equal share) before the merge, which is
exact, not an approximation.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from podracer import parallel

Array = jax.Array


class RunningStats(NamedTuple):
    """Mean and (population) variance of everything merged so far, elementwise `[*shape]`.

    count starts at a tiny positive value (`INITIAL_COUNT`), as gym's `RunningMeanStd`,
    so the first merged batch sets the statistics almost entirely.
    """

    mean: Array
    var: Array
    count: Array  # float32 scalar


INITIAL_COUNT = 1e-4


def init_stats(shape: tuple[int, ...] = ()) -> RunningStats:
    """Mean 0, variance 1 (normalising with them is the identity), count ~0."""
    return RunningStats(jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32),
                        jnp.asarray(INITIAL_COUNT, jnp.float32))


def merge(stats: RunningStats, batch_mean: Array, batch_var: Array, batch_count: Array) -> RunningStats:
    """Fold a batch with these moments into `stats` (Chan, Golub and LeVeque's update)."""
    count = stats.count + batch_count
    delta = batch_mean - stats.mean
    mean = stats.mean + delta * (batch_count / count)
    m2 = stats.var * stats.count + batch_var * batch_count + jnp.square(delta) * (stats.count * batch_count / count)
    return RunningStats(mean, m2 / count, count)


def update(stats: RunningStats, batch: Array, axis_name: parallel.AxisName = None) -> RunningStats:
    """Merge `batch [N..., *shape]` (every axis before the statistics' own is a sample axis)
    into `stats`; over `axis_name`, the samples of every device, each device's share equal."""
    batch = batch.astype(jnp.float32)
    sample_axes = tuple(range(batch.ndim - stats.mean.ndim))
    local_count = 1
    for axis in sample_axes:
        local_count *= batch.shape[axis]
    local_mean = jnp.mean(batch, axis=sample_axes)
    local_var = jnp.var(batch, axis=sample_axes)
    mean = parallel.pmean(local_mean, axis_name)
    # Total variance = mean of the within-device variances + variance of the device means.
    var = parallel.pmean(local_var + jnp.square(local_mean - mean), axis_name)
    devices = 1 if axis_name is None else jax.lax.psum(1, axis_name)
    return merge(stats, mean, var, jnp.asarray(local_count * devices, jnp.float32))


def normalize(stats: RunningStats, x: Array, clip: float | None = None, eps: float = 1e-8) -> Array:
    """`(x - mean) / sqrt(var + eps)`, float32, clipped to `[-clip, clip]` if given."""
    out = (x.astype(jnp.float32) - stats.mean) / jnp.sqrt(stats.var + eps)
    return out if clip is None else jnp.clip(out, -clip, clip)


def scale(stats: RunningStats, x: Array, clip: float | None = None, eps: float = 1e-8) -> Array:
    """`x / sqrt(var + eps)` (no centring: reward scaling), clipped if `clip` is given."""
    out = x.astype(jnp.float32) / jnp.sqrt(stats.var + eps)
    return out if clip is None else jnp.clip(out, -clip, clip)
