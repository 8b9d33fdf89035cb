"""MuZero (Schrittwieser et al. 2020) as a podracer `Agent`, acting with mctx's search.

Where its state lives (the `AgentState` contract):
- `params`: the network (representation, dynamics, prediction): all `act` needs, since
  acting is a search over the learned model.
- `opt_state`: `MuZeroLearnerState`, replicated learner-only state (optimizer, counters,
  replay credit).
- `local`: this device's sequence buffer (`podracer.replay_sequence`), never averaged.

`act` searches (`search.make_acting`); `update` adds the rollout to the device's buffer
and learns on sampled sequences (`learning.make_update`); `greedy_act` searches without
exploration noise, for `evaluate`.
"""

from __future__ import annotations

import jax.numpy as jnp

from podracer import parallel
from podracer.agents.muzero import learning, networks, search
from podracer.agents.muzero.config import MuZeroConfig
from podracer.config import ConfigError
from podracer.types import Agent, AgentState, DiscreteSpec, ObsSpec, PRNGKey


def check_specs(obs_spec: ObsSpec, action_spec: object) -> None:
    """MuZero supports discrete actions only (its model is conditioned on a one-hot action)."""
    if not isinstance(action_spec, DiscreteSpec):
        raise ConfigError(f"agent: MuZero supports discrete actions only, got {type(action_spec).__name__}")


def make_muzero(
    config: MuZeroConfig,
    obs_spec: ObsSpec,
    action_spec: DiscreteSpec,
    *,
    num_updates: int,
    axis_name: parallel.AxisName = None,
) -> Agent:
    """Build the MuZero `Agent`.

    num_updates: unused (no schedules); part of every agent factory's signature.
    axis_name:   mesh axis (or axes) to average gradients over; None on one device.
    """
    del num_updates
    check_specs(obs_spec, action_spec)
    network = networks.make_network(config, obs_spec, action_spec.num_actions)
    optimizer = learning.make_optimizer(config)
    replay = learning.make_replay(config)
    example = learning.example_step(tuple(obs_spec.shape), obs_spec.dtype, action_spec.num_actions)
    act, greedy_act, _ = search.make_acting(config, network)

    def init(key: PRNGKey) -> AgentState:
        params = networks.init_params(network, key, obs_spec)
        return AgentState(params, learning.initial_learner_state(optimizer, params),
                          jnp.zeros((), jnp.int32), replay.init(example))

    update = learning.make_update(config, network, optimizer, replay, example, axis_name)
    return Agent(init=init, act=act, update=update, greedy_act=greedy_act)


def make_prior_act(config: MuZeroConfig, obs_spec: ObsSpec, action_spec: DiscreteSpec):
    """`(params, obs, key) -> (action, {})` sampling the prediction network's policy at the
    encoded observation, no search: for benchmarks, the cost of acting without search."""
    check_specs(obs_spec, action_spec)
    network = networks.make_network(config, obs_spec, action_spec.num_actions)
    return search.make_acting(config, network)[2]


def without_search(agent: Agent, config: object, obs_spec: ObsSpec, action_spec: DiscreteSpec) -> Agent | None:
    """For a MuZero agent, the same agent acting with its prediction network alone
    (`make_prior_act`); None for any other agent. Benchmarks compare the two."""
    if not isinstance(config, MuZeroConfig):
        return None
    return agent._replace(act=make_prior_act(config, obs_spec, action_spec))


__all__ = ["MuZeroConfig", "make_muzero", "make_prior_act", "without_search"]
