"""Data that crosses the boundaries between environments, agents and runners.

Everything here is a pytree (NamedTuple or flax struct dataclass) so that it can travel
through `jit`, `vmap`, `lax.scan` and `shard_map` unchanged.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

Array = jax.Array
PRNGKey = jax.Array
Params = Any
Metrics = dict[str, Array]


class ObsSpec(NamedTuple):
    """Shape and dtype of one observation array (no batch axis).

    An environment's observation spec is a pytree with `ObsSpec` leaves shaped like its
    observations: one `ObsSpec` for a plain array, `MaskedObs(ObsSpec, ObsSpec((A,), bool))`
    for observations that carry legal-action masks (see `obs_spec_map`)."""

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


def box_spec(shape: Any, low: Any, high: Any) -> BoxSpec:
    """A `BoxSpec` with `low`/`high` as float32 arrays of `shape` (from any space's bounds)."""
    shape = tuple(int(n) for n in shape)
    bound = lambda x: np.broadcast_to(np.asarray(x, np.float32), shape).copy()  # noqa: E731
    return BoxSpec(shape, bound(low), bound(high))


def describe_action_spec(spec: ActionSpec) -> str:
    """A short human description of an action space, for error messages."""
    if isinstance(spec, DiscreteSpec):
        return f"discrete actions ({spec.num_actions})"
    low, high = np.asarray(spec.low).tolist(), np.asarray(spec.high).tolist()
    return f"continuous actions (BoxSpec, shape {tuple(spec.shape)}, low {low}, high {high})"


class MaskedObs(NamedTuple):
    """An observation that carries the legal actions of its state (e.g. a board game's legal
    moves): `obs [...]` as any observation, `action_mask bool [A]`, True where the action is
    legal. Batched, each field gains the batch axes (`[B, ...]`, `[T, B, ...]`).
    Agents that pick actions respect the mask, in acting and in their targets."""

    obs: Array
    action_mask: Array


Observation = Any  # an array `[...]`, or a pytree of them such as `MaskedObs`
ObservationSpec = Any  # an `ObsSpec`, or a pytree of them shaped like the observation


def is_obs_spec(x: Any) -> bool:
    return isinstance(x, ObsSpec)


def obs_spec_map(fn: Any, spec: ObservationSpec) -> Any:
    """`fn` applied to every `ObsSpec` leaf of an observation spec (kept whole, not flattened)."""
    return jax.tree.map(fn, spec, is_leaf=is_obs_spec)


def network_obs_spec(spec: ObservationSpec) -> ObsSpec:
    """The part of an observation spec a network sees: the `obs` of a `MaskedObs`."""
    return spec.obs if isinstance(spec, MaskedObs) else spec


def split_mask(obs: Observation) -> tuple[Any, Array | None]:
    """`(network input, action_mask or None)` of an observation or a batch of them."""
    if isinstance(obs, MaskedObs):
        return obs.obs, obs.action_mask
    return obs, None


def masked_obs_spec(obs_spec: ObsSpec, num_actions: int) -> MaskedObs:
    """The spec of `MaskedObs` observations: `obs_spec` and a bool mask `[num_actions]`."""
    return MaskedObs(obs_spec, ObsSpec((num_actions,), np.dtype(bool)))


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

    obs:         observation the action was chosen at (an array, or a pytree such as
                 `MaskedObs`, each leaf `[T, B, ...]`).
    action:      action taken.
    reward:      reward received for it.
    terminated:  the episode ended in a terminal state after this step (no bootstrap).
    truncated:   the episode was cut by a time limit after this step (bootstrap).
    next_obs:    the observation that followed, *before* any auto-reset: the successor state
                 the value bootstraps from (equals `obs[t + 1]` when the episode went on).
    extras:      what `Agent.act` returned besides the action (behaviour log-probabilities,
                 logits, values), each `[T, B, ...]`.
    start:       recurrent agents only (else None): `bool [T, B]`, True where `obs[t]` is
                 the first observation of an episode, so the core state was reset to its
                 initial value before reading it (the run's first step, and every step after
                 a terminated or truncated one).
    core:        recurrent agents only (else None): the core state the actor held before
                 step 0, *before* step 0's reset, each leaf `[1, B, ...]` (a time axis of one,
                 so that every leaf of a trajectory is time-major and is split, sharded and
                 joined along B like the others). The learner unrolls from it with `start`.
    """

    obs: Array
    action: Array
    reward: Array
    terminated: Array
    truncated: Array
    next_obs: Array
    extras: dict[str, Array]
    start: Array | None = None
    core: Any = None


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


class InitFn(Protocol):
    def __call__(self, key: PRNGKey) -> AgentState:
        """A fresh learner state. Parameters are replicated (identical on every learner
        device); `local`, if any, is one device's per-device state (the runner gives every
        device a copy). Must not be `vmap`ped over seeds: on CPU, jax 0.10 can
        deadlock in a vmapped orthogonal initializer (LAPACK QR inside a parallel batch map)."""


class ActFn(Protocol):
    def __call__(self, params: Params, obs: Observation, key: PRNGKey) -> tuple[Array, dict[str, Array]]:
        """Choose actions for a batch: `obs [B, ...]` (a `MaskedObs` carries `action_mask
        bool [B, A]`) -> `(action, extras)`. (A recurrent agent's `act` is a `RecurrentActFn`.)

        action: `int32 [B]` in `[0, A)` for a `DiscreteSpec`, legal under the mask when
                there is one; `float32 [B, *shape]` for a `BoxSpec`.
        extras: what `update` needs later about the behaviour policy (`log_prob`, `value`,
                ...), each leaf `[B, ...]`; the runner stores it in `Trajectory.extras`.
        Pure: the runner may call it on an actor device with parameters some updates old.
        """


CoreState = Any  # a recurrent agent's memory: a pytree of `[B, ...]` arrays


class RecurrentActFn(Protocol):
    def __call__(self, params: Params, obs: Observation, key: PRNGKey, core: CoreState,
                 start: Array) -> tuple[Array, dict[str, Array], CoreState]:
        """`act` of a recurrent agent (one with `initial_core`): as `ActFn`, plus the core
        state `[B, ...]` it held after the previous step and `start bool [B]`, True where
        `obs` is the first observation of an episode. The agent resets the core state of
        those environments to `initial_core` *before* reading `obs`, and returns the state
        after reading it: `(action, extras, core)`."""


class UpdateFn(Protocol):
    def __call__(self, state: AgentState, trajectory: Trajectory, key: PRNGKey) -> tuple[AgentState, Metrics]:
        """Learn from one device's share of a time-major trajectory `[T, B, ...]` (B: this
        device's environments): epochs, minibatches, loss, optimizer.

        Gradients and batch statistics are averaged over the mesh axis the agent was built
        with (`axis_name`), so the caller only runs it under `shard_map` (or alone, with
        `axis_name=None`). **Metrics rule**: the returned metrics are scalars already
        averaged over that axis (device-invariant, identical on every device); runners
        never average them over devices again, only over updates and seeds, and they check
        the rule (`podracer.agents.registry.checked_update`). `key` may differ per device.
        """


class GreedyActFn(Protocol):
    def __call__(self, params: Params, obs: Observation) -> Array:
        """The policy's most likely action, for evaluation: `obs [B, ...] -> action`, the
        same shapes, dtypes, bounds and legality as `ActFn`'s actions. A recurrent agent's
        takes and returns its core state as its `act` does: `(params, obs, core, start) ->
        (action, core)`."""


class Agent(NamedTuple):
    """An algorithm as a tuple of pure functions (optax style); see the Protocols above for
    each one's shapes. `greedy_act` is None for an algorithm with no greedy policy.

    A recurrent agent sets `initial_core(batch_size) -> CoreState`, the state every episode
    starts from; its `act` is then a `RecurrentActFn`, and the runners carry the core state
    of every environment from step to step and record `Trajectory.start` and `.core` so
    that `update` can unroll the same states. Runners go through `step` and
    `initial_acting_state`, which serve both kinds."""

    init: InitFn
    act: ActFn | RecurrentActFn
    update: UpdateFn
    greedy_act: GreedyActFn | None = None
    initial_core: Callable[[int], CoreState] | None = None

    @property
    def recurrent(self) -> bool:
        return self.initial_core is not None

    def initial_acting_state(self, batch_size: int) -> tuple[CoreState, Array | None]:
        """`(core, start)` before a batch's first step: the initial core state and every
        `start` True for a recurrent agent; `(None, None)` for a feed-forward one."""
        if not self.recurrent:
            return None, None
        return self.initial_core(batch_size), jnp.ones((batch_size,), bool)

    def step(self, params: Params, obs: Observation, key: PRNGKey, core: CoreState,
             start: Array | None) -> tuple[Array, dict[str, Array], CoreState]:
        """`(action, extras, core)` of one acting step for either kind of agent (a
        feed-forward agent's core stays None)."""
        if not self.recurrent:
            action, extras = self.act(params, obs, key)
            return action, extras, None
        return self.act(params, obs, key, core, start)

    def greedy_step(self, params: Params, obs: Observation, core: CoreState,
                    start: Array | None) -> tuple[Array, CoreState]:
        """`(action, core)` of `greedy_act` for either kind of agent."""
        if not self.recurrent:
            return self.greedy_act(params, obs), None
        return self.greedy_act(params, obs, core, start)


class BatchShape(NamedTuple):
    """What one device's `update` receives per call: `rollout_length` steps of
    `envs_per_device` environments (the `[T, B]` of its trajectory)."""

    rollout_length: int
    envs_per_device: int

    @property
    def transitions(self) -> int:
        return self.rollout_length * self.envs_per_device


def zeros_like_spec(spec: ObservationSpec, batch: tuple[int, ...] = ()) -> Any:
    """A zero observation (or batch of them) for shape inference and parameter init; a
    pytree like `spec` (e.g. a `MaskedObs` whose mask is all False)."""
    return obs_spec_map(lambda leaf: np.zeros(batch + tuple(leaf.shape), dtype=leaf.dtype), spec)
