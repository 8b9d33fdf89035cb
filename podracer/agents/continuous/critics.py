"""SAC's and TD3's critics, chosen by `config.critic` and written once for both.

- `twin`: two Q networks regress on the clipped double-Q target of Polyak-averaged target
  networks (Fujimoto et al. 2018).
- `crossq`: CrossQ (Bhatt et al. 2024, "CrossQ: Batch Normalization in Deep Reinforcement
  Learning for Greater Sample Efficiency and Simplicity", arXiv 1902.05605): twin critics
  with Batch Renormalization layers and no target networks. The current `(s, a)` and next
  `(s', a')` batches are concatenated and go through the critics in one forward pass in
  training mode, so both are normalised with the same batch statistics; the target is that
  pass's next-state Q without gradient. The actor's loss reads the critics in evaluation
  mode (running statistics), as the paper's.
- `distributional`: FastTD3's (Seo et al. 2025, arXiv 2505.22642) twin C51 critics over
  `num_atoms` atoms in `[v_min, v_max]`, trained by cross-entropy on the projected
  distributional target of the twin whose expected value is lower
  (`podracer.ops.distributional`); the actor sees their expected values.

A critic's variables are a flax variables dict: `{"params": ...}`, plus `"batch_stats"` (the
running statistics) for CrossQ. Only `trainable(variables)` is optimised; the statistics a
training pass computes come back with the loss and replace the old ones.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from podracer import parallel
from podracer.agents.continuous import networks
from podracer.agents.continuous.batch_renorm import TwinBatchRenormCritic
from podracer.agents.continuous.config import ReplayActorCriticConfig
from podracer.ops import continuous_q, distributional
from podracer.replay.buffer import Transition
from podracer.types import Array, Params, PRNGKey

Variables = dict[str, Any]


class Critics(NamedTuple):
    """The twin critics of SAC or TD3 as pure functions.

    init:       `(key, obs [1, D], unit action [1, A]) -> variables`.
    loss:       `(params, variables, target, items, unit_tm1 [B, A], next_unit [B, A],
                bonus_t [B]) -> (loss, (q_mean, variables'))`: the critics' loss on a batch,
                differentiable in `params` (`trainable(variables)`), `target` the target
                critics' variables (unused without them), `bonus_t` added to the next
                state's value (SAC's `-alpha log pi(a'|s')`, TD3's 0); `variables'` the
                variables with the statistics the pass computed and the old `params`.
    q:          `(variables, obs [N, D], unit action [N, A]) -> [2, N]`: both critics'
                (expected) values, in evaluation mode: what the actor maximises.
    has_target: whether target critics (and TD3's target actor) are kept and Polyak-averaged.
    """

    init: Callable[[PRNGKey, Array, Array], Variables]
    loss: Callable[..., tuple[Array, tuple[Array, Variables]]]
    q: Callable[[Variables, Array, Array], Array]
    has_target: bool


def trainable(variables: Variables) -> Params:
    """The part of a critic's variables the optimiser moves: `{"params": ...}`."""
    return {"params": variables["params"]}


def make_critics(config: ReplayActorCriticConfig, axis_name: parallel.AxisName) -> Critics:
    """The critics `config.critic` names; `axis_name` is the device axis CrossQ's batch
    statistics are averaged over (None on one device)."""
    if config.critic == "crossq":
        return _crossq(config, axis_name)
    if config.critic == "distributional":
        return _distributional(config)
    return _twin(config)


def _twin(config: ReplayActorCriticConfig) -> Critics:
    net = networks.TwinCritic(networks.make_torso(config))
    return twin_critics(net.init, net.apply)


def twin_critics(init: Callable[[PRNGKey, Array, Array], Variables],
                 apply: Callable[[Variables, Array, Array], Array]) -> Critics:
    """Twin critics with Polyak-averaged targets (Fujimoto et al. 2018) over any network:
    `apply(variables, obs [N, ...], unit action [N, A]) -> Q [2, N]`, `init` its initialiser."""

    def loss(
        params: Params,
        variables: Variables,
        target: Variables,
        items: Transition,
        unit_tm1: Array,
        next_unit: Array,
        bonus_t: Array,
    ):
        q_t = apply(target, items.next_obs, next_unit)
        # SAC's soft target at alpha = 1 and log-prob -bonus_t: r + discount (min(Q1', Q2') + bonus_t)
        y = continuous_q.soft_q_target(items.reward, items.discount, q_t[0], q_t[1], -bonus_t, jnp.float32(1.0))
        q_tm1 = apply(params, items.obs, unit_tm1)
        return continuous_q.twin_q_loss(q_tm1[0], q_tm1[1], y), (jnp.mean(q_tm1), variables)

    return Critics(init, loss, apply, has_target=True)


def _crossq(config: ReplayActorCriticConfig, axis_name: parallel.AxisName) -> Critics:
    def build(train: bool) -> TwinBatchRenormCritic:
        return TwinBatchRenormCritic(
            tuple(config.hidden_sizes), train, axis_name, config.renorm_momentum, config.renorm_warmup
        )

    train_net, eval_net = build(True), build(False)

    def loss(
        params: Params,
        variables: Variables,
        target: Any,
        items: Transition,
        unit_tm1: Array,
        next_unit: Array,
        bonus_t: Array,
    ):
        del target
        B = unit_tm1.shape[0]
        obs = jax.tree.map(lambda x, y: jnp.concatenate([x, y]), items.obs, items.next_obs)
        q, updated = train_net.apply(
            {**variables, **params}, obs, jnp.concatenate([unit_tm1, next_unit]), mutable=["batch_stats"]
        )
        q_tm1, q_t = q[:, :B], jax.lax.stop_gradient(q[:, B:])
        y = continuous_q.soft_q_target(items.reward, items.discount, q_t[0], q_t[1], -bonus_t, jnp.float32(1.0))
        return continuous_q.twin_q_loss(q_tm1[0], q_tm1[1], y), (jnp.mean(q_tm1), {**variables, **updated})

    return Critics(train_net.init, loss, eval_net.apply, has_target=False)


def _distributional(config: ReplayActorCriticConfig) -> Critics:
    net = networks.TwinCritic(networks.make_torso(config), config.num_atoms)
    atoms = distributional.categorical_support(config.v_min, config.v_max, config.num_atoms)

    def loss(
        params: Params,
        variables: Variables,
        target: Variables,
        items: Transition,
        unit_tm1: Array,
        next_unit: Array,
        bonus_t: Array,
    ):
        probs_t = jax.nn.softmax(net.apply(target, items.next_obs, next_unit))
        y = distributional.categorical_double_q_target(
            atoms, probs_t[0], probs_t[1], items.reward, items.discount, bonus_t
        )
        logits = net.apply(params, items.obs, unit_tm1)
        q_mean = jnp.mean(distributional.categorical_mean(atoms, jax.nn.softmax(logits)))
        return distributional.categorical_twin_q_loss(logits[0], logits[1], y), (q_mean, variables)

    def q(variables: Variables, obs: Array, unit: Array) -> Array:
        return distributional.categorical_mean(atoms, jax.nn.softmax(net.apply(variables, obs, unit)))

    return Critics(net.init, loss, q, has_target=True)
