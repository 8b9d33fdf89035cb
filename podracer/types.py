"""Data that crosses the boundaries between environments, agents and runners.

Everything here is a pytree (NamedTuple or flax struct dataclass) so that it can travel
through `jit`, `vmap`, `lax.scan` and `shard_map` unchanged.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import numpy as np
from flax import struct

Array = jax.Array
PRNGKey = jax.Array
Params = Any
Metrics = dict[str, Array]


class ObsSpec(NamedTuple):
    """Shape and dtype of one observation (no batch axis)."""

    shape: tuple[int, ...]
    dtype: Any


class DiscreteSpec(NamedTuple):
    """A discrete action space with actions `0 .. num_actions - 1`."""

    num_actions: int


class BoxSpec(NamedTuple):
    """A bounded continuous action space: float actions of `shape`, each in `[low, high]`
    (elementwise; `low`/`high` are scalars or arrays broadcastable to `shape`)."""

    shape: tuple[int, ...]
    low: Any
    high: Any


ActionSpec = DiscreteSpec | BoxSpec


class MaskedObs(NamedTuple):
    """An observation that carries the legal actions of its state (e.g. the prefix-adder
    environment): `obs [...]` as any observation, `action_mask bool [A]`, True where the
    action is legal. Batched, each field gains the batch axes (`[B, ...]`, `[T, B, ...]`).
    Agents that pick actions respect the mask, in acting and in their targets."""

    obs: Array
    action_mask: Array


class TimeStep(NamedTuple):
    """What an environment returns after a step, with auto-reset already applied.

    `terminated` and `truncated` are kept apart: a terminated episode has no future value,
    a truncated one (time limit) does, and `final_obs` is the observation it ended in, so a
    learner can bootstrap from `V(final_obs)`. When the episode did not end, `final_obs`
    equals `obs`. When it ended, `obs` is already the first observation of the next episode.

    `episode_return` / `episode_length` are running totals of the current episode; on a
    step where the episode ended they hold the totals of the episode that just finished.
    Shapes are `[...]` for one environment and `[B, ...]` for a batch.
    """

    obs: Array
    reward: Array
    terminated: Array
    truncated: Array
    final_obs: Array
    episode_return: Array
    episode_length: Array

    @property
    def done(self) -> Array:
        return self.terminated | self.truncated


class Trajectory(NamedTuple):
    """A time-major rollout, `[T, B, ...]`, as collected by a runner and fed to `update`.

    obs:         observation the action was chosen at.
    action:      action taken.
    reward:      reward received for it.
    terminated:  the episode ended in a terminal state after this step (no bootstrap).
    truncated:   the episode was cut by a time limit after this step (bootstrap).
    next_obs:    the observation that followed, *before* any auto-reset: the successor state
                 the value bootstraps from (equals `obs[t + 1]` when the episode went on).
    extras:      what `Agent.act` returned besides the action (behaviour log-probabilities,
                 logits, values), each `[T, B, ...]`.
    """

    obs: Array
    action: Array
    reward: Array
    terminated: Array
    truncated: Array
    next_obs: Array
    extras: dict[str, Array]


@struct.dataclass
class AgentState:
    """The learner's whole state: a pytree.

    params, opt_state and update_count are replicated across learner devices (identical
    on each, kept so by averaged gradients). `local` is per-device state, e.g. a replay
    buffer: sharded over the devices, one independent copy each, never averaged; runners
    give it a leading device axis outside the per-device program and strip it inside.
    On-policy agents leave it None.
    """

    params: Params
    opt_state: Any
    update_count: Array  # int32 scalar: number of `update` calls applied
    local: Any = None


class Agent(NamedTuple):
    """An algorithm as a tuple of pure functions (optax style).

    init:   `(key) -> AgentState`; its `local` part (if any) is one device's.
    act:    `(params, obs [B, ...], key) -> (action [B], extras)`; `extras` holds what the
            loss needs later (e.g. `log_prob`, `value`), each `[B, ...]`.
    update: `(state, trajectory [T, B, ...], key) -> (state, metrics)`; epochs, minibatches,
            loss and optimizer. Gradients and any batch statistics are averaged over the
            mesh axis names the agent was built with, so the caller only has to run it
            under `shard_map` (or not at all, on one device).
    greedy_act: `(params, obs [B, ...]) -> action [B]`, the most likely action, for
            evaluation; None if the algorithm has no such notion.
    """

    init: Callable[[PRNGKey], AgentState]
    act: Callable[[Params, Array, PRNGKey], tuple[Array, dict[str, Array]]]
    update: Callable[[AgentState, Trajectory, PRNGKey], tuple[AgentState, Metrics]]
    greedy_act: Callable[[Params, Array], Array] | None = None


def zeros_like_spec(spec: ObsSpec, batch: tuple[int, ...] = ()) -> np.ndarray:
    """A zero observation (or batch of them) for shape inference and parameter init."""
    return np.zeros(batch + tuple(spec.shape), dtype=spec.dtype)
