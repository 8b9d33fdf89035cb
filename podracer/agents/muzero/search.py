"""Acting with search: mctx's Gumbel MuZero or MuZero policy over the learned model.

The search is a pure function of `(params, obs, key)`: the learned model is handed to
mctx as its root and recurrent functions, nothing global (mctx's own examples' shape). It
runs wherever `act` runs: on Anakin's devices, inside the compiled rollout, and on
Sebulba's actor devices, as in the Podracer paper.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import mctx

from podracer import ops, parallel
from podracer.agents.muzero.config import MuZeroConfig
from podracer.agents.muzero.networks import MuZeroNetwork
from podracer.types import Array, Params, PRNGKey

# The key `greedy_act` searches with: evaluation takes no key, and a fixed one keeps it
# deterministic (with `gumbel_scale = 0` / no Dirichlet noise the key does not matter anyway).
GREEDY_KEY_SEED = 0


class SearchOutput(NamedTuple):
    """What one search over a batch returns.

    action:     `[B]` the action to take.
    policy:     `[B, A]` the search's improved policy (the policy target): Gumbel MuZero's
                `softmax(logits + sigma(completed Q))`, or MuZero's visit distribution.
    root_value: `[B]` the search's value of the root (the value target's bootstrap).
    """

    action: Array
    policy: Array
    root_value: Array



def make_model_fns(network: MuZeroNetwork, value_max: float, gamma: float):
    """`(root_fn, recurrent_fn)` for mctx over `network`: `root_fn(params, obs [B, ...]) ->
    RootFnOutput`; `recurrent_fn(params, key, action [B], latent [B, N]) ->
    (RecurrentFnOutput, next latent)`, discounting every step by `gamma` (the model does
    not predict episode ends; see `losses.unroll_targets` for what it learns past one)."""

    def root_fn(params: Params, obs: Array) -> mctx.RootFnOutput:
        latent = network.apply(params, obs, method=MuZeroNetwork.represent)
        logits, value_logits = network.apply(params, latent, method=MuZeroNetwork.predict)
        return mctx.RootFnOutput(prior_logits=logits, value=ops.categorical_to_scalar(value_logits, value_max),
                                 embedding=latent)

    def recurrent_fn(params: Params, key: PRNGKey, action: Array, latent: Array):
        del key
        next_latent, reward_logits = network.apply(params, latent, action, method=MuZeroNetwork.dynamics)
        logits, value_logits = network.apply(params, next_latent, method=MuZeroNetwork.predict)
        output = mctx.RecurrentFnOutput(
            reward=ops.categorical_to_scalar(reward_logits, value_max),
            discount=jnp.full(action.shape, gamma, jnp.float32),
            prior_logits=logits, value=ops.categorical_to_scalar(value_logits, value_max),
        )
        return output, next_latent

    return root_fn, recurrent_fn


def run_search(
    config: MuZeroConfig, root: mctx.RootFnOutput, recurrent_fn: Callable, params: Params, key: PRNGKey,
    greedy: bool,
) -> SearchOutput:
    """The search `config.search` names from `root` with `recurrent_fn`; `greedy` turns its
    exploration off (no Gumbel noise, no Dirichlet noise, the most visited action)."""
    if config.search == "gumbel":
        out = mctx.gumbel_muzero_policy(
            params, key, root, recurrent_fn, num_simulations=config.num_simulations,
            max_num_considered_actions=config.max_num_considered_actions,
            gumbel_scale=0.0 if greedy else config.gumbel_scale,
            qtransform=functools.partial(mctx.qtransform_completed_by_mix_value, epsilon=config.min_q_range),
        )
        action = out.action
    else:
        out = mctx.muzero_policy(
            params, key, root, recurrent_fn, num_simulations=config.num_simulations,
            dirichlet_alpha=config.dirichlet_alpha, dirichlet_fraction=0.0 if greedy else config.dirichlet_fraction,
            temperature=config.temperature,
            qtransform=functools.partial(mctx.qtransform_by_parent_and_siblings, epsilon=config.min_q_range),
        )
        action = jnp.argmax(out.action_weights, axis=-1) if greedy else out.action
    return SearchOutput(action.astype(jnp.int32), out.action_weights, out.search_tree.summary().value)


def make_acting(config: MuZeroConfig, network: MuZeroNetwork):
    """`(act, greedy_act, prior_act)` of the `Agent` contract.

    act:        `(params, obs [B, ...], key) -> (action [B], {"search_policy" [B, A],
                "root_value" [B]})`: search, then the search's action; its policy and root
                value travel in `extras` as the learner's targets.
    greedy_act: `(params, obs) -> action [B]`: search without exploration noise (a fixed
                key), the search's action: how `evaluate` acts.
    prior_act:  `(params, obs, key) -> (action [B], {})`: a sample of the prediction
                network's policy at the encoded observation, no search (benchmarks: what
                acting costs without the search).
    """
    root_fn, recurrent_fn = make_model_fns(network, config.value_max, config.gamma)

    def search(params: Params, obs: Array, key: PRNGKey, greedy: bool) -> SearchOutput:
        # mctx's loops cannot be typed under `shard_map(check_vma=True)` (Anakin's program).
        unchecked = parallel.without_vma_check(
            lambda params, obs, key: run_search(config, root_fn(params, obs), recurrent_fn, params, key, greedy))
        return unchecked(params, obs, key)

    def act(params: Params, obs: Array, key: PRNGKey) -> tuple[Array, dict[str, Array]]:
        out = search(params, obs, key, greedy=False)
        return out.action, {"search_policy": out.policy, "root_value": out.root_value}

    def greedy_act(params: Params, obs: Array) -> Array:
        return search(params, obs, jax.random.key(GREEDY_KEY_SEED), greedy=True).action

    def prior_act(params: Params, obs: Array, key: PRNGKey) -> tuple[Array, dict[str, Array]]:
        logits = root_fn(params, obs).prior_logits
        return jax.random.categorical(key, logits).astype(jnp.int32), {}

    return act, greedy_act, prior_act


