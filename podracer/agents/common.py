"""Pieces that several agents share: network construction, acting, minibatching."""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from podracer import networks
from podracer.ops import categorical_log_prob
from podracer.types import Array, DiscreteSpec, ObsSpec, Params, PRNGKey, zeros_like_spec

TORSOS = ("mlp", "nature_cnn", "impala_cnn")


def make_actor_critic(
    torso: str,
    hidden_sizes: tuple[int, ...],
    activation: str,
    shared_torso: bool,
    obs_spec: ObsSpec,
    action_spec: DiscreteSpec,
) -> nn.Module:
    """The actor-critic network an agent config asks for."""
    if torso == "mlp":
        def body():
            return networks.MLP(tuple(hidden_sizes), activation, obs_ndim=len(obs_spec.shape))
    elif torso in ("nature_cnn", "impala_cnn"):
        body = getattr(networks, "NatureCNN" if torso == "nature_cnn" else "ImpalaCNN")
    else:
        raise ValueError(f"unknown torso {torso!r}; choose one of {TORSOS}")
    return networks.ActorCritic(action_spec.num_actions, body(), None if shared_torso else body())


def init_params(network: nn.Module, key: PRNGKey, obs_spec: ObsSpec) -> Params:
    return network.init(key, zeros_like_spec(obs_spec, (1,)))


def make_sampling_act(network: nn.Module) -> Callable[[Params, Array, PRNGKey], tuple[Array, dict]]:
    """`act(params, obs [B, ...], key) -> (action [B], {"log_prob", "value"})`, sampling
    from the categorical policy; `log_prob` is the behaviour policy's, for the loss."""

    def act(params: Params, obs: Array, key: PRNGKey) -> tuple[Array, dict[str, Array]]:
        logits, value = network.apply(params, obs)
        action = jax.random.categorical(key, logits)
        return action, {"log_prob": categorical_log_prob(logits, action), "value": value}

    return act


def make_greedy_act(network: nn.Module) -> Callable[[Params, Array], Array]:
    """`greedy_act(params, obs [B, ...]) -> action [B]`: the argmax of the policy logits."""

    def greedy_act(params: Params, obs: Array) -> Array:
        logits, _ = network.apply(params, obs)
        return jnp.argmax(logits, axis=-1)

    return greedy_act


def flatten_time_batch(tree: Any) -> Any:
    """`[T, B, ...] -> [T * B, ...]` for every leaf."""
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), tree)


def shuffled_minibatches(key: PRNGKey, batch: Any, num_minibatches: int) -> Any:
    """Shuffle a flat batch `[N, ...]` and split it into `[num_minibatches, N / M, ...]`."""
    size = jax.tree.leaves(batch)[0].shape[0]
    if size % num_minibatches:
        raise ValueError(f"batch of {size} does not split into {num_minibatches} minibatches")
    permutation = jax.random.permutation(key, size)
    return jax.tree.map(
        lambda x: jnp.take(x, permutation, axis=0).reshape(
            (num_minibatches, size // num_minibatches) + x.shape[1:]
        ),
        batch,
    )
