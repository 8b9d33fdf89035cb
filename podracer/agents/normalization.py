"""Observation normalisation and reward scaling as agent state, around any `Agent`.

`with_normalization(agent, ...)` returns an agent whose parameters are
`NormalizedParams(network, obs_stats, return_stats)`: the wrapped agent's parameters and
running statistics (`podracer.ops.running_stats`). They are parameters, not a side
channel, so everything that carries parameters carries them: Sebulba publishes them to
the actors, checkpoints save them, `evaluate` restores and uses them.

- **Observations**: `act` and `greedy_act` see `clip((obs - mean) / std, +-obs_clip)`.
  `update` normalises the trajectory with the statistics it was *collected* with (those
  in `state.params`, which acting used), so the loss's log-probabilities are the
  behaviour's own, and only then merges the trajectory's raw observations into the
  statistics (CleanRL's `NormalizeObservation` does the same per step).
- **Rewards** (CleanRL's `NormalizeReward`): rewards are divided by the standard
  deviation of the discounted return `G_t = r_t + gamma * G_{t-1}` and clipped to
  `+-reward_clip`. The return's statistics are merged from this trajectory first and
  then used. One departure: `G` restarts at each trajectory's first step (and after
  every episode end) instead of running on from the previous trajectory, so no per-
  environment state has to survive between updates (Sebulba's environments restart on
  resume); with rollouts of 100+ steps at `gamma = 0.99` the difference is small.

Both statistics merge every device's data (`axis_name`) and so stay identical on all
devices, as the parameters do.
"""

from __future__ import annotations

from typing import NamedTuple

import jax

from podracer import parallel
from podracer.config import ConfigError
from podracer.ops import discounted_returns
from podracer.ops import running_stats as rs
from podracer.types import (
    Agent,
    AgentState,
    Array,
    MaskedObs,
    Observation,
    ObservationSpec,
    Params,
    PRNGKey,
    Trajectory,
    is_obs_spec,
    network_obs_spec,
    split_mask,
)


class NormalizedParams(NamedTuple):
    """What `act` receives from a normalising agent; a field is None when it is off."""

    network: Params  # the wrapped agent's parameters
    obs_stats: rs.RunningStats | None  # per observation element, `[*obs_shape]`
    return_stats: rs.RunningStats | None  # of the discounted return, scalars


def with_normalization(
    agent: Agent,
    obs_spec: ObservationSpec,
    *,
    normalize_observations: bool,
    obs_clip: float,
    scale_rewards: bool,
    reward_clip: float,
    gamma: float,
    axis_name: parallel.AxisName,
) -> Agent:
    """`agent` with observation normalisation and/or reward scaling (see the module doc);
    `agent` itself when both are off."""
    if not (normalize_observations or scale_rewards):
        return agent
    if normalize_observations and not is_obs_spec(network_obs_spec(obs_spec)):
        raise ConfigError("agent.normalize_observations: normalisation takes array observations, and these are "
                          "structured (dict/NamedTuple); set it to false")

    def init(key: PRNGKey) -> AgentState:
        state = agent.init(key)
        return state.replace(params=NormalizedParams(
            state.params,
            rs.init_stats(tuple(network_obs_spec(obs_spec).shape)) if normalize_observations else None,
            rs.init_stats() if scale_rewards else None,
        ))

    def observe(params: NormalizedParams, obs: Observation) -> Observation:
        """Normalised observations; a `MaskedObs` keeps its mask as it is."""
        if params.obs_stats is None:
            return obs
        inputs, legal = split_mask(obs)
        inputs = rs.normalize(params.obs_stats, inputs, obs_clip)
        return inputs if legal is None else MaskedObs(inputs, legal)

    # `*core`: a recurrent agent's core state and start flags, passed through.
    def act(params: NormalizedParams, obs: Array, key: PRNGKey, *core):
        return agent.act(params.network, observe(params, obs), key, *core)

    def greedy_act(params: NormalizedParams, obs: Array, *core):
        return agent.greedy_act(params.network, observe(params, obs), *core)

    def update(state: AgentState, traj: Trajectory, key: PRNGKey):
        params: NormalizedParams = state.params
        return_stats = params.return_stats
        if return_stats is not None:
            end = traj.terminated | traj.truncated
            returns = jax.vmap(discounted_returns, in_axes=(1, 1, None), out_axes=1)(traj.reward, end, gamma)
            return_stats = rs.update(return_stats, returns, axis_name)
            traj = traj._replace(reward=rs.scale(return_stats, traj.reward, reward_clip))
        raw_obs = traj.obs
        if params.obs_stats is not None:
            traj = traj._replace(obs=observe(params, traj.obs), next_obs=observe(params, traj.next_obs))
        inner, metrics = agent.update(state.replace(params=params.network), traj, key)
        obs_stats = params.obs_stats
        if obs_stats is not None:
            obs_stats = rs.update(obs_stats, split_mask(raw_obs)[0], axis_name)
        return inner.replace(params=NormalizedParams(inner.params, obs_stats, return_stats)), metrics

    return agent._replace(init=init, act=act, update=update,
                          greedy_act=None if agent.greedy_act is None else greedy_act)
