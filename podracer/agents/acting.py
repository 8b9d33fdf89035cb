"""Acting with an actor-critic network: its policy output and value over a batch of
observations (legal-action masks applied), sampled and greedy `act` functions, and the same
forward pass over a time-major batch."""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax

from podracer.agents.minibatches import flatten_time_batch
from podracer.agents.policies import Categorical, Policy
from podracer.ops import masked_logits
from podracer.types import Array, Observation, Params, PRNGKey, split_mask


def policy_and_value(network: nn.Module, params: Params, obs: Observation) -> tuple[Any, Array]:
    """An actor-critic over a flat batch: `obs [N, ...] -> (out, value [N])`, the policy
    output `out` being logits `[N, A]` (illegal actions' `-inf` when the observations carry
    masks, `MaskedObs`) or a Gaussian's `(mean, log_std)`."""
    inputs, legal = split_mask(obs)
    out, value = network.apply(params, inputs)
    return (out if legal is None else masked_logits(out, legal)), value


CATEGORICAL = Categorical()


def make_sampling_act(
    network: nn.Module, policy: Policy = CATEGORICAL, value: bool = True
) -> Callable[[Params, Observation, PRNGKey], tuple[Array, dict]]:
    """`act(params, obs [B, ...], key) -> (action [B, ...], {"log_prob", "value", ...})`,
    sampling from the policy (a categorical over the legal actions only); `log_prob` is the
    behaviour policy's, for the loss (a Gaussian adds its unclipped sample, see
    `podracer.agents.policies`). With `value` False the extras hold no `"value"`, and the
    critic is not computed (XLA drops what nothing reads)."""

    def act(params: Params, obs: Observation, key: PRNGKey) -> tuple[Array, dict[str, Array]]:
        out, values = policy_and_value(network, params, obs)
        action, extras = policy.sample(key, out)
        return action, ({**extras, "value": values} if value else extras)

    return act


def make_greedy_act(network: nn.Module, policy: Policy = CATEGORICAL) -> Callable[[Params, Observation], Array]:
    """`greedy_act(params, obs [B, ...]) -> action [B, ...]`: the policy's most likely
    action (the argmax of the logits among the legal actions; a Gaussian's mean, clipped to
    the box)."""

    def greedy_act(params: Params, obs: Observation) -> Array:
        out, _ = policy_and_value(network, params, obs)
        return policy.mode(out)

    return greedy_act


def apply_time_major(network: nn.Module, params: Params, obs: Observation) -> tuple[Any, Array]:
    """The network over a time-major batch: `obs [T, B, ...] -> (out, value [T, B])`, the
    policy output `out` with `[T, B]` leading every leaf (logits `[T, B, A]`, illegal
    actions' `-inf` for masked observations, see `policy_and_value`)."""
    T, B = jax.tree.leaves(obs)[0].shape[:2]
    out, value = policy_and_value(network, params, flatten_time_batch(obs))
    return jax.tree.map(lambda x: x.reshape((T, B) + x.shape[1:]), out), value.reshape((T, B))
