"""Value transforms and categorical (two-hot) representations of scalars, rlax style.

MuZero (Schrittwieser et al. 2020, appendix F) predicts values and rewards as categorical
distributions over a fixed support of a transformed scale: a scalar `x` is squashed by the
invertible `h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x` (Pohlen et al. 2018), and `h(x)` is
spread over the two neighbouring support points (two-hot) in proportion to its distance to
each, so that the distribution's mean is exactly `h(x)` (inside the support). The network is
trained with cross-entropy against that distribution; its prediction is read back as
`h^-1(mean)`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

Array = jax.Array


def signed_hyperbolic(x: Array, eps: float = 1e-3) -> Array:
    """`h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x`, elementwise; the inverse of `signed_parabolic`."""
    return jnp.sign(x) * (jnp.sqrt(jnp.abs(x) + 1.0) - 1.0) + eps * x


def signed_parabolic(x: Array, eps: float = 1e-3) -> Array:
    """`h^-1(x)`, elementwise, in closed form (Pohlen et al. 2018, proposition A.2).

    `z = (sqrt(1 + 4 eps c) - 1) / (2 eps)` with `c = eps + 1 + |x|` is computed as
    `2 c / (sqrt(1 + 4 eps c) + 1)`, the same number without float32's cancellation
    (rlax's form loses ~1e-4 relative near |x| = 1)."""
    c = eps + 1.0 + jnp.abs(x)
    z = 2.0 * c / (jnp.sqrt(1.0 + 4.0 * eps * c) + 1.0)
    return jnp.sign(x) * (jnp.square(z) - 1.0)


def support(min_value: float, max_value: float, num_bins: int) -> Array:
    """The `[num_bins]` evenly spaced support points from `min_value` to `max_value`."""
    return jnp.linspace(min_value, max_value, num_bins, dtype=jnp.float32)


def two_hot(x: Array, min_value: float, max_value: float, num_bins: int) -> Array:
    """`[...] -> [..., num_bins]`: the distribution over `support(...)` whose mass sits on
    the two points around `x` (clipped into the support), with mean exactly `x`."""
    x = jnp.clip(x.astype(jnp.float32), min_value, max_value)
    position = (x - min_value) / (max_value - min_value) * (num_bins - 1)
    lower = jnp.clip(jnp.floor(position), 0, num_bins - 2)
    upper_weight = position - lower
    one_hot = lambda index: jax.nn.one_hot(index.astype(jnp.int32), num_bins)  # noqa: E731
    return one_hot(lower) * (1.0 - upper_weight)[..., None] + one_hot(lower + 1) * upper_weight[..., None]


def from_two_hot(probs: Array, min_value: float, max_value: float) -> Array:
    """`[..., num_bins] -> [...]`: the mean of a distribution over `support(...)`."""
    return jnp.sum(probs * support(min_value, max_value, probs.shape[-1]), axis=-1)


def scalar_to_categorical(x: Array, max_value: float, num_bins: int, eps: float = 1e-3) -> Array:
    """MuZero's target: `two_hot(h(x))` over `num_bins` points evenly spaced on the
    transformed scale between `h(-max_value)` and `h(max_value)`, `[...] -> [..., num_bins]`
    (MuZero's Atari support, the integers -300 .. 300 of h, is `max_value = h^-1(300)`,
    601 bins). Scalars beyond `max_value` are clipped to it."""
    bound = _support_bound(max_value, eps)
    return two_hot(signed_hyperbolic(x, eps), -bound, bound, num_bins)


def categorical_to_scalar(logits: Array, max_value: float, eps: float = 1e-3) -> Array:
    """MuZero's prediction: `h^-1` of the mean of `softmax(logits)` over the support of
    `scalar_to_categorical`, `[..., num_bins] -> [...]`."""
    bound = _support_bound(max_value, eps)
    return signed_parabolic(from_two_hot(jax.nn.softmax(logits), -bound, bound), eps)


def categorical_cross_entropy(logits: Array, target_probs: Array) -> Array:
    """`-sum_i p_i log softmax(logits)_i`, `[..., N] -> [...]`; no gradient to the target."""
    return -jnp.sum(jax.lax.stop_gradient(target_probs) * jax.nn.log_softmax(logits), axis=-1)


def _support_bound(max_value: float, eps: float) -> float:
    """`h(max_value)` as a Python float (static: it fixes the support's points)."""
    return float(math.sqrt(abs(max_value) + 1.0) - 1.0 + eps * abs(max_value))
