"""Actor-critic losses for continuous actions learned from replay: SAC (Haarnoja et al. 2018,
"Soft Actor-Critic Algorithms and Applications", arXiv 1812.05905) and TD3 (Fujimoto et al.
2018, "Addressing Function Approximation Error in Actor-Critic Methods").

Actions here are in the unit box `[-1, 1]^A` (a tanh's range); `to_box` and `from_box` map
them to and from an environment's `[low, high]`. The squashed Gaussian's log-probability is
the exact change of variables of `a = tanh(u)`, `u ~ N(mean, std)`:
`log pi(a) = log N(u) - sum log(1 - tanh(u)^2)`, with `log(1 - tanh(u)^2)` in the stable form
`2 (log 2 - u - softplus(-2 u))` (it neither underflows nor takes the log of 0 where
`|u|` is large). Batch functions take `[B, ...]` and return `[B]` unless they say otherwise.
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp

from podracer.ops.gaussian import gaussian_log_prob

Array = jax.Array

_LOG_2 = math.log(2.0)


def tanh_log_det_jacobian(u: Array) -> Array:
    """`log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2 u))`, elementwise: the log-derivative
    of the squashing `tanh` at `u` (SAC, Haarnoja et al. 2018, app. C, eq. 26)."""
    return 2.0 * (_LOG_2 - u - jax.nn.softplus(-2.0 * u))


def squashed_gaussian_log_prob(mean: Array, log_std: Array, u: Array) -> Array:
    """`log pi(tanh(u))` of the tanh-squashed diagonal Gaussian, for pre-squash samples `u`.

    Args:
      mean, log_std: `[B, A]` the Gaussian's parameters before squashing.
      u: `[B, A]` the pre-squash sample (its action is `tanh(u)`).
    Returns:
      `[B]` the log-density of `tanh(u)` in `[-1, 1]^A` (Haarnoja et al. 2018, eq. 26).
    """
    chex.assert_equal_shape([mean, u])
    return gaussian_log_prob(mean, log_std, u) - jnp.sum(tanh_log_det_jacobian(u), axis=-1)


def squashed_gaussian_sample(key: Array, mean: Array, log_std: Array) -> tuple[Array, Array]:
    """A reparameterised sample of the squashed Gaussian and its log-density.

    Args:
      key: a PRNG key.
      mean, log_std: `[B, A]`.
    Returns:
      `(action [B, A] in (-1, 1), log_prob [B])`; gradients flow to `mean` and `log_std`
      through the action (the reparameterisation trick, Haarnoja et al. 2018, eq. 11).
    """
    u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)
    return jnp.tanh(u), squashed_gaussian_log_prob(mean, log_std, u)


def box_log_scale(low: Array, high: Array) -> Array:
    """`sum log((high - low) / 2)`: what an action's log-density loses when `to_box` stretches
    it from `[-1, 1]^A` to `[low, high]` (a scalar)."""
    return jnp.sum(jnp.log((jnp.asarray(high) - jnp.asarray(low)) / 2.0))


def to_box(unit: Array, low: Array, high: Array) -> Array:
    """`unit [..., A]` in `[-1, 1]` as actions in `[low, high]` (affine), clipped into the box
    against float rounding."""
    low, high = jnp.asarray(low, unit.dtype), jnp.asarray(high, unit.dtype)
    return jnp.clip(low + (unit + 1.0) * (high - low) / 2.0, low, high)


def from_box(action: Array, low: Array, high: Array) -> Array:
    """The inverse of `to_box`: actions `[..., A]` in `[low, high]` as `[-1, 1]`."""
    low, high = jnp.asarray(low, action.dtype), jnp.asarray(high, action.dtype)
    return 2.0 * (action - low) / (high - low) - 1.0


def soft_q_target(r_t: Array, discount_t: Array, q1_t: Array, q2_t: Array, log_prob_t: Array,
                  temperature: Array) -> Array:
    """SAC's soft target with clipped double Q (Haarnoja et al. 2018, eq. 3 and sec. 6):
    `r + discount * (min(Q1', Q2')(s', a') - alpha log pi(a'|s'))`, `a' ~ pi(.|s')`.

    Args:
      r_t: `[B]` (n-step) return; discount_t: `[B]` its bootstrap discount, 0 where the
        episode terminated (a truncated one bootstraps).
      q1_t, q2_t: `[B]` target critics at the bootstrap observation and a fresh action.
      log_prob_t: `[B]` that action's log-probability; temperature: scalar alpha.
    Returns:
      `[B]` targets, no gradient through them.
    """
    chex.assert_equal_shape([r_t, discount_t, q1_t, q2_t, log_prob_t])
    soft_value = jnp.minimum(q1_t, q2_t) - temperature * log_prob_t
    return jax.lax.stop_gradient(r_t + discount_t * soft_value)


def clipped_double_q_target(r_t: Array, discount_t: Array, q1_t: Array, q2_t: Array) -> Array:
    """TD3's clipped double-Q target (Fujimoto et al. 2018, eq. 10):
    `r + discount * min(Q1', Q2')(s', a')`, `[B]` each, no gradient through it."""
    chex.assert_equal_shape([r_t, discount_t, q1_t, q2_t])
    return jax.lax.stop_gradient(r_t + discount_t * jnp.minimum(q1_t, q2_t))


def twin_q_loss(q1_tm1: Array, q2_tm1: Array, target: Array, weights: Array | None = None) -> Array:
    """Both critics regress on the one target: `mean(w (Q1 - y)^2) + mean(w (Q2 - y)^2)`
    (the sum of CleanRL's two MSE losses). `q1_tm1, q2_tm1, target, weights`: `[B]`; scalar."""
    chex.assert_equal_shape([q1_tm1, q2_tm1, target])
    w = jnp.ones_like(target) if weights is None else weights
    return jnp.mean(w * jnp.square(q1_tm1 - target)) + jnp.mean(w * jnp.square(q2_tm1 - target))


def sac_actor_loss(q1: Array, q2: Array, log_prob: Array, temperature: Array) -> Array:
    """SAC's policy loss `mean(alpha log pi(a|s) - min(Q1, Q2)(s, a))`, `a` the reparameterised
    sample (Haarnoja et al. 2018, eq. 12). `q1, q2, log_prob`: `[B]`; returns a scalar."""
    chex.assert_equal_shape([q1, q2, log_prob])
    return jnp.mean(temperature * log_prob - jnp.minimum(q1, q2))


def temperature_loss(log_temperature: Array, log_prob: Array, target_entropy: float) -> Array:
    """SAC's automatic temperature (Haarnoja et al. 2018, eq. 18):
    `mean(-alpha (log pi(a|s) + target_entropy))`, `alpha = exp(log_temperature)`, its
    gradient pushing alpha up when the policy's entropy `-log pi` is below the target.

    Args:
      log_temperature: scalar, the parameter.
      log_prob: `[B]` log-probabilities of the policy's samples (no gradient through them).
      target_entropy: the entropy the policy is held to (default `-|A|`).
    Returns: a scalar.
    """
    return -jnp.mean(jnp.exp(log_temperature) * jax.lax.stop_gradient(log_prob + target_entropy))


def td3_actor_loss(q1: Array) -> Array:
    """TD3's deterministic policy gradient loss `-mean(Q1(s, mu(s)))` (Fujimoto et al. 2018,
    alg. 1; Silver et al. 2014). `q1`: `[B]`; returns a scalar."""
    return -jnp.mean(q1)


def smoothed_target_action(key: Array, unit_action: Array, noise_std: float, noise_clip: float) -> Array:
    """TD3's target policy smoothing (Fujimoto et al. 2018, eq. 14):
    `clip(mu'(s') + clip(eps, -c, c), -1, 1)`, `eps ~ N(0, noise_std^2)`, in unit-box units
    (the noise scales with the box when `to_box` maps it). `unit_action`: `[B, A]`."""
    noise = jnp.clip(noise_std * jax.random.normal(key, unit_action.shape, unit_action.dtype),
                     -noise_clip, noise_clip)
    return jnp.clip(unit_action + noise, -1.0, 1.0)
