"""Returns and advantage estimators."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

Array = jax.Array


def gae_advantages(
    r_t: Array,
    discount_t: Array,
    v_tm1: Array,
    v_t: Array,
    lambda_: float | Array,
    end_t: Array,
) -> tuple[Array, Array]:
    """Generalized advantage estimation (Schulman et al. 2016, eq. 11-16) for one trajectory.

    All inputs are `[T]`, time-major, for the transition `s_{t-1} -> s_t`:
      r_t:        reward.
      discount_t: `gamma` where the episode went on *or was truncated*, 0 where it terminated.
      v_tm1:      value of the state the action was taken in.
      v_t:        value of the successor state, before any auto-reset (for a truncated
                  episode, the value of its final observation).
      end_t:      1 where the episode ended (terminated or truncated): the recursion stops
                  there, so no advantage leaks across episodes.

    A terminated episode bootstraps from nothing (`discount_t = 0`); a truncated one
    bootstraps from `v_t` and then stops. Returns `(advantages [T], value_targets [T])`.
    """
    chex.assert_rank([r_t, discount_t, v_tm1, v_t, end_t], 1)
    chex.assert_equal_shape([r_t, discount_t, v_tm1, v_t, end_t])
    delta = r_t + discount_t * v_t - v_tm1
    # Where the episode ended the trace is cut; elsewhere it decays by gamma * lambda.
    gamma_lambda = jnp.where(end_t, 0.0, discount_t * lambda_)

    def backward(acc, inputs):
        delta_t, gl_t = inputs
        acc = delta_t + gl_t * acc
        return acc, acc

    _, advantages = jax.lax.scan(
        backward, jnp.zeros_like(delta[0]), (delta, gamma_lambda), reverse=True
    )
    return advantages, advantages + v_tm1


def discounted_returns(r_t: Array, end_t: Array, gamma: float | Array) -> Array:
    """Running discounted return forward in time, `G_t = r_t + gamma * G_{t-1}`, restarting
    after each episode end (`end_t`: the episode ended with step t) and at `t = 0`.

    The quantity whose scale reward scaling divides by (the `NormalizeReward` wrapper of
    Gymnasium / CleanRL's `ppo_continuous_action`). `r_t`, `end_t`: `[T]`; returns `[T]`.
    """
    chex.assert_rank([r_t, end_t], 1)
    keep = jnp.concatenate([jnp.zeros((1,), r_t.dtype), 1.0 - end_t[:-1].astype(r_t.dtype)])

    def forward(g, inputs):
        r, k = inputs
        g = r + gamma * k * g
        return g, g

    # The initial carry varies over a mesh axis wherever either input does (a constant
    # reward may be device-invariant inside `shard_map` while the episode ends are not).
    return jax.lax.scan(forward, jnp.zeros_like(r_t[0] * keep[0]), (r_t, keep))[1]


def lambda_returns(
    r_t: Array,
    discount_t: Array,
    v_t: Array,
    lambda_: float | Array,
    end_t: Array | None = None,
) -> Array:
    """TD(lambda) returns for one trajectory (Sutton and Barto 2018, sec. 12.1; rlax's
    `lambda_returns` with an episode cut).

    All inputs are `[T]`, time-major, for the transition `s_{t-1} -> s_t`:
      r_t:        reward.
      discount_t: `gamma` where the episode went on *or was truncated*, 0 where it terminated.
      v_t:        value of the successor state, before any auto-reset (a truncated episode's
                  final observation).
      lambda_:    a scalar or `[T]`.
      end_t:      optional `[T]` bool, the episode ended (terminated or truncated) after this
                  step: the return stops there, `G_t = r_t + discount_t * v_t`, and nothing of
                  the next episode leaks in. Without it only `discount_t = 0` cuts it (rlax).

    `G_t = r_t + discount_t * ((1 - lambda_t) * v_t + lambda_t * G_{t+1})`, with
    `G_{T-1} = r_{T-1} + discount_{T-1} * v_{T-1}`. Returns `[T]`.
    """
    chex.assert_rank([r_t, discount_t, v_t], 1)
    chex.assert_equal_shape([r_t, discount_t, v_t])
    lambda_ = jnp.ones_like(discount_t) * lambda_
    if end_t is not None:
        chex.assert_equal_shape([end_t, discount_t])
        lambda_ = jnp.where(end_t, 0.0, lambda_)

    def backward(g_next, inputs):
        r, discount, v, lam = inputs
        g = r + discount * ((1.0 - lam) * v + lam * g_next)
        return g, g

    # Starting from G_T = v_{T-1}, the last step bootstraps from v whatever its lambda.
    _, returns = jax.lax.scan(backward, v_t[-1], (r_t, discount_t, v_t, lambda_), reverse=True)
    return returns
