"""Value-based ops, rlax style: n-step targets over one trajectory, Q-learning targets,
Huber loss and epsilon-greedy action selection.

Names carry time as in rlax: `q_tm1` are the values at the state the action was taken in,
`q_t` those at the state bootstrapped from, `discount_t` the discount applied to them.
`legal_t` (optional, `bool [B, A]`) marks the legal actions of the bootstrap state: the
targets then maximise over legal actions only (a row with none is treated as all legal).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from podracer.ops.losses import legal_or_all
from podracer.ops.returns import lambda_returns

Array = jax.Array


def masked_argmax(values: Array, legal: Array | None = None) -> Array:
    """`argmax` over the last axis, among legal actions only when `legal` is given: `[..., A] -> [...]`."""
    if legal is None:
        return jnp.argmax(values, axis=-1)
    return jnp.argmax(jnp.where(legal_or_all(legal), values, -jnp.inf), axis=-1)


def _value_at(values: Array, index: Array) -> Array:
    return jnp.take_along_axis(values, index[..., None], axis=-1)[..., 0]


def n_step_targets(
    r_t: Array, terminated_t: Array, truncated_t: Array, gamma: float, n: int
) -> tuple[Array, Array, Array]:
    """n-step returns over one trajectory of T steps (Sutton 1988; Mnih et al. 2016).

    r_t:          `[T]` reward of the action taken at step t.
    terminated_t: `[T]` the episode ended in a terminal state after step t.
    truncated_t:  `[T]` the episode was cut by a time limit after step t.

    Returns `(return_t, discount_t, bootstrap_index_t)`, each `[T]`: step t's target is
    `return_t + discount_t * V(next_obs[bootstrap_index_t])`. The sum stops after n steps,
    at the end of an episode, or at the end of the trajectory (steps near the end use
    fewer than n rewards). A terminated last step gives `discount_t = 0` (no bootstrap);
    a truncated one keeps `gamma ** m` and bootstraps from its final observation.
    """
    chex.assert_rank([r_t, terminated_t, truncated_t], 1)
    chex.assert_equal_shape([r_t, terminated_t, truncated_t])
    T = r_t.shape[0]
    start = jnp.arange(T)
    returns = jnp.zeros(T, jnp.float32)
    scale = jnp.ones(T, jnp.float32)  # gamma ** (rewards summed so far)
    last = start
    alive = jnp.ones(T, bool)
    for k in range(n):
        index = jnp.minimum(start + k, T - 1)
        include = alive & (start + k < T)
        returns = returns + jnp.where(include, scale * r_t[index], 0.0)
        scale = jnp.where(include, scale * gamma, scale)
        last = jnp.where(include, index, last)
        alive = include & ~(terminated_t[index] | truncated_t[index])
    discount = jnp.where(terminated_t[last], 0.0, scale)
    return returns, discount, last


def q_lambda_targets(
    r_t: Array, discount_t: Array, q_t: Array, lambda_: float | Array, end_t: Array | None = None
) -> Array:
    """Peng's Q(lambda) targets for one trajectory (Peng and Williams 1996), the returns PQN
    regresses on (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning").

    r_t, discount_t: `[T]` (discount 0 where the episode terminated); q_t: `[T, A]` action
    values of the successor state (a truncated episode's final observation); end_t: `[T]`
    bool, the episode ended after step t: the return stops there and bootstraps from
    `max_a q_t` (times 0 if terminated). The lambda-return over `v_t = max_a q_t`:
    `G_t = r_t + discount_t * ((1 - lambda) max_a q_t + lambda G_{t+1})`. rlax's `q_lambda`
    is `G_t - q_tm1[a_tm1]`. No gradient flows through the targets. Returns `[T]`.
    """
    chex.assert_rank([r_t, discount_t, q_t], [1, 1, 2])
    return jax.lax.stop_gradient(lambda_returns(r_t, discount_t, jnp.max(q_t, axis=-1), lambda_, end_t))


def q_learning_target(r_t: Array, discount_t: Array, q_t: Array, legal_t: Array | None = None) -> Array:
    """DQN's target `r + discount * max_a Q_target(s', a)` (Mnih et al. 2015), the max over
    legal actions when `legal_t` is given.

    r_t, discount_t: `[B]`; q_t: `[B, A]` target-network values at the bootstrap state.
    """
    chex.assert_rank([r_t, discount_t, q_t], [1, 1, 2])
    best = jnp.max(q_t, axis=-1) if legal_t is None else _value_at(q_t, masked_argmax(q_t, legal_t))
    return jax.lax.stop_gradient(r_t + discount_t * best)


def double_q_learning_target(r_t: Array, discount_t: Array, q_t_value: Array, q_t_selector: Array,
                             legal_t: Array | None = None) -> Array:
    """Double DQN's target (van Hasselt et al. 2016): the online network selects the
    action (among legal ones, given `legal_t`), the target network evaluates it:
    `r + discount * Q_target(s', argmax Q_online(s', .))`.

    q_t_value: `[B, A]` target-network values; q_t_selector: `[B, A]` online-network values.
    """
    chex.assert_rank([r_t, discount_t, q_t_value, q_t_selector], [1, 1, 2, 2])
    value = _value_at(q_t_value, masked_argmax(q_t_selector, legal_t))
    return jax.lax.stop_gradient(r_t + discount_t * value)


def td_error(q_tm1: Array, a_tm1: Array, target: Array) -> Array:
    """`target - Q(s, a)`, `[B]`, for values `q_tm1 [B, A]` and actions `a_tm1 [B]`."""
    chex.assert_rank([q_tm1, a_tm1, target], [2, 1, 1])
    return target - jnp.take_along_axis(q_tm1, a_tm1[:, None].astype(jnp.int32), axis=-1)[:, 0]


def huber_loss(x: Array, delta: float = 1.0) -> Array:
    """Elementwise Huber loss: `0.5 x^2` for `|x| <= delta`, linear beyond (rlax's)."""
    abs_x = jnp.abs(x)
    quadratic = jnp.minimum(abs_x, delta)
    return 0.5 * quadratic**2 + delta * (abs_x - quadratic)


def epsilon_greedy(key: jax.Array, q: Array, epsilon: Array, legal: Array | None = None) -> Array:
    """With probability `epsilon` a uniformly random action, else `argmax q`: `[B, A] -> [B]`
    int32. Given `legal` (`bool [B, A]`), both the random and the greedy action are legal."""
    explore_key, action_key = jax.random.split(key)
    batch, num_actions = q.shape
    if legal is None:
        random_action = jax.random.randint(action_key, (batch,), 0, num_actions)
    else:  # uniform over the legal actions
        random_action = jax.random.categorical(action_key, jnp.where(legal_or_all(legal), 0.0, -jnp.inf))
    explore = jax.random.uniform(explore_key, (batch,)) < epsilon
    return jnp.where(explore, random_action, masked_argmax(q, legal)).astype(jnp.int32)
