"""Replay for V-trace agents: each update learns from its fresh sequences plus sequences
replayed from this learner device's buffer, in a set proportion (CLEAR, Rolnick et al. 2019;
LASER, Schmitt et al. 2020; the replay of "Accelerating Distributed Deep RL", RLDM 2019).

The buffer (`podracer.replay.sequence`, in `AgentState.local`) stores whole trajectory steps
with the behaviour policy's `extras` (its log-probabilities), so V-trace corrects the replayed
data as it corrects policy lag. Each update first adds its `[T, B]` rollout, then samples
`M = B * fraction / (1 - fraction)` sequences of the same length `T` and learns from the
`[T, B + M]` concatenation: replay is available from the first update (then it re-reads
fresh data) and the replay ratio is bounded by construction, each update replaying `M * T`
steps for the `B * T` it adds.

A replayed sequence may cross from one rollout into the next. Where an environment did not
go on from its last stored step (Sebulba restarts its environments on resume, the buffers
restored), that step is marked truncated before the rollout is added (`stream_continues`,
as DQN's replay does): V-trace then bootstraps it from its own `next_obs` and cuts the trace
there, instead of running it into another stream.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from podracer import parallel
from podracer.config import check
from podracer.replay.buffer import same_observations
from podracer.replay.sequence import SequenceReplay, make_sequence_replay, max_capacity
from podracer.types import (
    Agent,
    AgentState,
    Array,
    BatchShape,
    Observation,
    ObservationSpec,
    Params,
    PRNGKey,
    Trajectory,
    zeros_like_spec,
)


def replayed_per_update(fraction: float, envs_per_device: int) -> int | None:
    """`M = B f / (1 - f)` replayed sequences per update, or None if that is not a whole number."""
    exact = envs_per_device * fraction / (1.0 - fraction)
    count = round(exact)
    return count if abs(exact - count) < 1e-6 else None


def check_replay(fraction: float, capacity: int, batch: BatchShape, field: str = "agent.replay_fraction") -> int:
    """ConfigError naming the field unless `fraction` of the update's sequences can be replayed
    for this batch (a whole number of sequences, that fit in the buffer); returns `M`."""
    replayed = replayed_per_update(fraction, batch.envs_per_device)
    check(replayed is not None, field,
          f"must make B * f / (1 - f) a whole number of replayed sequences for the {batch.envs_per_device} "
          "environments of each device (e.g. 0.5: as many replayed as fresh)", fraction)
    check(batch.transitions <= capacity, "agent.replay_capacity",
          f"must hold one device's rollout of {batch.transitions} steps", capacity)
    check(capacity <= max_capacity(replayed), "agent.replay_capacity",
          f"must be <= {max_capacity(replayed)} to sample {replayed} sequences per update exactly "
          "(podracer.replay.sequence.max_capacity)", capacity)
    return replayed


def stream_continues(buffer: SequenceReplay, local: Any, obs: Observation, num_envs: int) -> Array:
    """`bool [B]`: each environment's first observation of a rollout `obs [T, B, ...]` is the
    `next_obs` its newest stored step ended in, so its stream goes on (False where the
    environment restarted, as Sebulba's do when a run resumes with its buffers restored)."""
    return same_observations(buffer.newest(local, num_envs).next_obs, jax.tree.map(lambda x: x[0], obs))


def with_replay(agent: Agent, fraction: float, capacity: int, obs_spec: ObservationSpec,
                axis_name: parallel.AxisName) -> Agent:
    """`agent` learning from each update's `[T, B]` rollout plus `M` sequences replayed from a
    buffer of `capacity` steps in `AgentState.local` (per device, never averaged); `agent`
    itself when `fraction` is 0. The stored step's `extras` are whatever `act` returns (found
    by `jax.eval_shape`), so any V-trace agent's behaviour data is kept. `agent.update` must
    not use `local` itself. Metrics gain `replay_size`, steps held, averaged over `axis_name`."""
    if fraction <= 0:
        return agent

    def example_step(params: Params, key: PRNGKey) -> Trajectory:
        obs = zeros_like_spec(obs_spec, (1,))
        shapes = jax.eval_shape(agent.act, params, obs, key)
        action, extras = jax.tree.map(lambda s: jnp.zeros(s.shape[1:], s.dtype), shapes)
        single = jax.tree.map(lambda x: x[0], obs)
        return Trajectory(obs=single, action=action, reward=jnp.zeros((), jnp.float32),
                          terminated=jnp.zeros((), bool), truncated=jnp.zeros((), bool), next_obs=single,
                          extras=extras)

    def init(key: PRNGKey) -> AgentState:
        state = agent.init(key)
        return state.replace(local=make_sequence_replay(capacity, 1, 1).init(example_step(state.params, key)))

    def update(state: AgentState, traj: Trajectory, key: PRNGKey):
        T, B = traj.reward.shape[:2]
        replayed = replayed_per_update(fraction, B)
        buffer = make_sequence_replay(capacity, T, replayed)
        key, replay_key = jax.random.split(key)
        local = buffer.add(buffer.end_streams(state.local, ~stream_continues(buffer, state.local, traj.obs, B)), traj)
        sample = buffer.sample(local, replay_key, B).items
        mixed = jax.tree.map(lambda fresh, old: jnp.concatenate([fresh, old.astype(fresh.dtype)], axis=1),
                             traj, sample)
        inner, metrics = agent.update(state.replace(local=None), mixed, key)
        metrics = {**metrics, "replay_size": parallel.pmean(buffer.size(local).astype(jnp.float32), axis_name)}
        return inner.replace(local=local), metrics

    return agent._replace(init=init, update=update)
