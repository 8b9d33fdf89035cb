"""V-trace off-policy returns and advantages (Espeholt et al. 2018, IMPALA).

rlax's semantics and names (`rlax.vtrace_td_error_and_advantage`) over one time-major
trajectory `[T]`; `vmap` over the batch axis for `[T, B]` data. One addition: `end_t`,
for trajectories that cross episode boundaries with auto-reset (see below).
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

Array = jax.Array
Numeric = float | Array


class VTraceOutput(NamedTuple):
    """errors:       `v_s - V(x_s)`, the V-trace value targets minus the values, `[T]`.
    pg_advantage: `min(rho_bar_pg, rho_s) * (r_s + gamma v_{s+1} - V(x_s))`, `[T]`.
    q_estimate:   `r_s + gamma v_{s+1}`, the V-trace estimate of `Q(x_s, a_s)`, `[T]`.
    """

    errors: Array
    pg_advantage: Array
    q_estimate: Array


def vtrace_td_error_and_advantage(
    v_tm1: Array,
    v_t: Array,
    r_t: Array,
    discount_t: Array,
    rho_tm1: Array,
    lambda_: Numeric = 1.0,
    clip_rho_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
    stop_target_gradients: bool = True,
    end_t: Array | None = None,
) -> VTraceOutput:
    """V-trace TD errors and policy-gradient advantages for one trajectory.

    "IMPALA: Scalable Distributed Deep-RL with Importance Weighted Actor-Learner
    Architectures", Espeholt et al. 2018 (https://arxiv.org/abs/1802.01561), eq. 1
    (the n-step V-trace target `v_s`) and eq. 4 (the policy-gradient advantage).

    All inputs are `[T]`, time-major, for the transition `x_{t-1} -> x_t`:
      v_tm1:      value of the state the action was taken in.
      v_t:        value of the successor state. In podracer this is `V(next_obs)`, the
                  successor *before* any auto-reset, so a truncated episode bootstraps
                  from its final observation (rlax's `values[1:]` is the same thing when
                  the trajectory holds one episode).
      r_t:        reward.
      discount_t: `gamma`, or 0 where the episode terminated (no bootstrap).
      rho_tm1:    importance ratios `pi(a_{t-1}|x_{t-1}) / mu(a_{t-1}|x_{t-1})`.
      lambda_:    trace mixing, a scalar or `[T]`.
      end_t:      optional, `[T]` bool: the episode ended after this step (terminated *or*
                  truncated). The trace is cut there and `q_estimate` bootstraps from
                  `v_t`, so nothing leaks from the next episode of an auto-resetting
                  environment. Without it (rlax's behaviour) only `discount_t = 0` cuts
                  the trace, which is right for termination but not for truncation.

    Returns `VTraceOutput(errors, pg_advantage, q_estimate)`, each `[T]`. With
    `stop_target_gradients`, no gradient flows through the targets `errors + v_tm1`.
    """
    chex.assert_rank([v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_], [1, 1, 1, 1, 1, {0, 1}])
    chex.assert_type([v_tm1, v_t, r_t, discount_t, rho_tm1], float)
    chex.assert_equal_shape([v_tm1, v_t, r_t, discount_t, rho_tm1])
    if end_t is None:
        end_t = jnp.zeros_like(discount_t, dtype=bool)
    chex.assert_equal_shape([end_t, discount_t])

    lambda_ = jnp.ones_like(discount_t) * lambda_
    errors = vtrace_errors(v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_, clip_rho_threshold, end_t)
    if stop_target_gradients:
        errors = jax.lax.stop_gradient(errors + v_tm1) - v_tm1

    # Bootstrap of Q(x_{t-1}, a_{t-1}): the next state's V-trace target mixed with its
    # value by lambda; at the end of the trajectory or of an episode, simply v_t.
    targets_tm1 = errors + v_tm1
    next_target = lambda_[:-1] * targets_tm1[1:] + (1.0 - lambda_[:-1]) * v_tm1[1:]
    q_bootstrap = jnp.concatenate([jnp.where(end_t[:-1], v_t[:-1], next_target), v_t[-1:]])
    q_estimate = r_t + discount_t * q_bootstrap
    pg_advantage = jnp.minimum(clip_pg_rho_threshold, rho_tm1) * (q_estimate - v_tm1)
    return VTraceOutput(errors=errors, pg_advantage=pg_advantage, q_estimate=q_estimate)


def vtrace_errors(
    v_tm1: Array,
    v_t: Array,
    r_t: Array,
    discount_t: Array,
    rho_tm1: Array,
    lambda_: Array,
    clip_rho_threshold: float,
    end_t: Array,
) -> Array:
    """`v_s - V(x_s)` by the backward recursion of eq. 1, cut where `end_t`; all `[T]`."""
    c_tm1 = jnp.minimum(1.0, rho_tm1) * lambda_
    td_errors = jnp.minimum(clip_rho_threshold, rho_tm1) * (r_t + discount_t * v_t - v_tm1)
    trace_t = jnp.where(end_t, 0.0, discount_t * c_tm1)

    def backward(acc, inputs):
        td_error, trace = inputs
        acc = td_error + trace * acc
        return acc, acc

    _, errors = jax.lax.scan(backward, jnp.zeros_like(td_errors[0]), (td_errors, trace_t), reverse=True)
    return errors
