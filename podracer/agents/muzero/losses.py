"""MuZero's loss (Schrittwieser et al. 2020, eq. 1 and appendix G), as top-level functions:
the K-step unroll of the model, the targets of one replayed sequence, the loss between
predictions and targets, and the whole loss on replayed sequences (`sequence_loss`).

Shapes: a sampled sequence has L = K + n + 1 steps (K unroll steps, n TD steps); the unroll
predicts at K + 1 states (`k = 0` the encoded observation, `k >= 1` after k dynamics steps).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp

from podracer import ops
from podracer.agents.muzero.config import MuZeroConfig
from podracer.agents.muzero.networks import MuZeroNetwork
from podracer.types import Array, Params


def scale_gradient(x: Array, scale: float) -> Array:
    """`x` in the forward pass; its gradient multiplied by `scale` in the backward pass."""
    return x * scale + jax.lax.stop_gradient(x) * (1.0 - scale)


def unroll_model(
    represent: Callable[[Array], Array],
    dynamics: Callable[[Array, Array], tuple[Array, Array]],
    predict: Callable[[Array], tuple[Array, Array]],
    obs: Array,
    actions: Array,
    gradient_scale: float,
) -> tuple[Array, Array, Array]:
    """Encode `obs [M, ...]`, then apply the dynamics along `actions [K, M]`.

    Returns `(policy_logits [K + 1, M, A], value_logits [K + 1, M, V], reward_logits [K, M, V])`.
    As in the paper's pseudocode, the state passed on from each dynamics step to the next
    has its gradient scaled by `gradient_scale` (1/2): the gradient reaching the dynamics
    and the representation through k steps is scaled by `gradient_scale ** (k - 1)`.
    """
    chex.assert_rank(actions, 2)
    latent = represent(obs)

    def step(state: Array, action: Array) -> tuple[Array, tuple[Array, Array]]:
        next_state, reward_logits = dynamics(state, action)
        return scale_gradient(next_state, gradient_scale), (next_state, reward_logits)

    _, (latents, reward_logits) = jax.lax.scan(step, latent, actions)
    latents = jnp.concatenate([latent[None], latents])  # [K + 1, M, N]
    K1, M = latents.shape[:2]
    policy_logits, value_logits = predict(latents.reshape((K1 * M,) + latents.shape[2:]))
    return (policy_logits.reshape((K1, M) + policy_logits.shape[1:]),
            value_logits.reshape((K1, M) + value_logits.shape[1:]), reward_logits)


class UnrollTargets(NamedTuple):
    """Targets and weights for one unroll (batched: M of them along axis 1, `[K + 1, M, ...]`):

    value, value_mask:   `[K + 1]` n-step value target of state k and its weight.
    reward, reward_mask: `[K]` target of the reward predicted at unroll step k + 1 (the
                         reward of action k) and its weight.
    policy, policy_mask: `[K + 1, A]` search policy at state k, `[K + 1]` weight.
    """

    value: Array
    value_mask: Array
    reward: Array
    reward_mask: Array
    policy: Array
    policy_mask: Array


def unroll_targets(
    reward: Array, terminated: Array, truncated: Array, root_value: Array, final_value: Array, search_policy: Array,
    gamma: float, td_steps: int, unroll_steps: int, absorbing_terminal: bool = True,
) -> UnrollTargets:
    """The targets of one replayed sequence of L >= K + n + 1 steps (`[L]` each,
    `search_policy [L, A]`), for an unroll from its first step.

    Value targets are n-step returns (`ops.n_step_targets`) bootstrapped from the search's
    root value of the step n later (`root_value`), cut at episode ends: a terminated
    episode does not bootstrap, a truncated one bootstraps from `final_value`, the value of
    its final observation. States past the end of the first step's episode are masked
    (no policy, value or reward target), except, with `absorbing_terminal`, past a
    termination, where the model is taught an absorbing state: value 0 and reward 0 (the
    paper's pseudocode), so that a search running past the end sees no more reward.
    """
    chex.assert_rank([reward, terminated, truncated, root_value, final_value, search_policy], [1, 1, 1, 1, 1, 2])
    L, K = reward.shape[0], unroll_steps
    if L < K + td_steps + 1:
        raise ValueError(f"a sequence of {L} steps is too short for {K} unroll steps and {td_steps} TD steps")
    done = terminated | truncated
    returns, discount, last = ops.n_step_targets(reward, terminated, truncated, gamma, td_steps)
    bootstrap = jnp.where(truncated[last], final_value[last], root_value[jnp.minimum(last + 1, L - 1)])
    value = returns + discount * bootstrap
    in_episode = (jnp.cumsum(done) - done) == 0  # no end before step t
    absorbing = absorbing_terminal & jnp.any(done) & terminated[jnp.argmax(done)]
    state_ok, action_ok = in_episode[: K + 1], in_episode[:K]
    return UnrollTargets(
        value=jnp.where(state_ok, value[: K + 1], 0.0),
        value_mask=(state_ok | absorbing).astype(jnp.float32),
        reward=jnp.where(action_ok, reward[:K], 0.0),
        reward_mask=(action_ok | absorbing).astype(jnp.float32),
        policy=search_policy[: K + 1],
        policy_mask=state_ok.astype(jnp.float32),
    )


def muzero_loss(
    policy_logits: Array, value_logits: Array, reward_logits: Array, targets: UnrollTargets, value_max: float,
    value_coef: float = 0.25, policy_coef: float = 1.0, reward_coef: float = 1.0,
) -> tuple[Array, dict[str, Array]]:
    """MuZero's loss over M unrolls, time-major: predictions `[K + 1, M, ...]` (rewards
    `[K, M, V]`) and `targets` batched along axis 1 (`value [K + 1, M]`, `policy [K + 1, M, A]`).

    Cross-entropy of the value and reward logits against `two_hot(h(target))` over the
    transformed support up to `value_max` (`ops.scalar_to_categorical`), and of the policy
    logits against the search policy, each weighted by its mask; the terms of unroll steps
    `k >= 1` are scaled by 1/K (the paper's gradient scaling of the unrolled heads). The
    total is summed over steps and averaged over the M unrolls (masked entries count as
    zeros, so the mean over several devices' batches is the mean over their union).
    """
    K = reward_logits.shape[0]
    chex.assert_shape([value_logits, policy_logits], (K + 1, reward_logits.shape[1], None))
    step_scale = jnp.concatenate([jnp.ones(1), jnp.full(K, 1.0 / K)])[:, None]  # [K + 1, 1]
    num_bins = value_logits.shape[-1]
    value_ce = ops.categorical_cross_entropy(value_logits,
                                             ops.scalar_to_categorical(targets.value, value_max, num_bins))
    reward_ce = ops.categorical_cross_entropy(reward_logits,
                                              ops.scalar_to_categorical(targets.reward, value_max, num_bins))
    policy_ce = ops.categorical_cross_entropy(policy_logits, targets.policy)
    M = value_logits.shape[1]
    value_loss = jnp.sum(step_scale * targets.value_mask * value_ce) / M
    policy_loss = jnp.sum(step_scale * targets.policy_mask * policy_ce) / M
    reward_loss = jnp.sum(targets.reward_mask * reward_ce) / (K * M)
    loss = value_coef * value_loss + policy_coef * policy_loss + reward_coef * reward_loss
    value_error = ops.categorical_to_scalar(value_logits[0], value_max) - targets.value[0]
    metrics = {
        "loss": loss, "value_loss": value_loss, "policy_loss": policy_loss, "reward_loss": reward_loss,
        "value_error": jnp.mean(jnp.abs(value_error) * targets.value_mask[0]),
        "policy_entropy": jnp.mean(-jnp.sum(jax.nn.softmax(policy_logits[0]) * jax.nn.log_softmax(policy_logits[0]),
                                            axis=-1)),
    }
    return loss, metrics


def sequence_loss(
    params: Params, network: MuZeroNetwork, items: Any, config: MuZeroConfig
) -> tuple[Array, dict[str, Array]]:
    """MuZero's loss on replayed sequences (Schrittwieser et al. 2020, eq. 1): each
    sequence's targets (`unroll_targets`), the model unrolled from its first observation along
    its first K actions (`unroll_model`), and `muzero_loss` between them.

    Args:
      params: the network's parameters, differentiated.
      network: the `MuZeroNetwork` (`represent`, `dynamics`, `predict`).
      items: `[L, M, ...]` sequences with the fields of a replayed step: `obs`, `action`,
        `reward`, `terminated`, `truncated`, `root_value`, `final_value`, `search_policy`.
      config: the hyperparameters read: `unroll_steps` (K), `td_steps`, `gamma`,
        `absorbing_terminal`, `dynamics_gradient_scale`, `value_max`, `value_coef`,
        `policy_coef`, `reward_coef`.

    Returns:
      `(loss, metrics)` of `muzero_loss`.
    """
    K = config.unroll_steps
    per_sequence_targets = jax.vmap(
        lambda *xs: unroll_targets(*xs, config.gamma, config.td_steps, K, config.absorbing_terminal),
        in_axes=1, out_axes=1,
    )
    targets = per_sequence_targets(items.reward, items.terminated, items.truncated, items.root_value,
                                   items.final_value, items.search_policy)
    predictions = unroll_model(
        lambda obs: network.apply(params, obs, method=MuZeroNetwork.represent),
        lambda latent, action: network.apply(params, latent, action, method=MuZeroNetwork.dynamics),
        lambda latent: network.apply(params, latent, method=MuZeroNetwork.predict),
        items.obs[0], items.action[:K], config.dynamics_gradient_scale,
    )
    return muzero_loss(*predictions, targets, config.value_max, config.value_coef, config.policy_coef,
                       config.reward_coef)
