"""MuZero (Schrittwieser et al. 2020) as a podracer `Agent`, acting with mctx's search.

Where its state lives (the `AgentState` contract):
- `params`: the network (representation, dynamics, prediction): all `act` needs, since
  acting is a search over the learned model.
- `opt_state`: `MuZeroLearnerState`, replicated learner-only state (optimizer, counters,
  replay credit).
- `local`: this device's sequence buffer (`podracer.replay.sequence`, each environment's
  next observation stashed after its write head), never averaged.

`act` searches (`search.make_acting`); `update` adds the rollout to the device's buffer
and learns on sampled sequences (`learning.make_update`); `greedy_act` searches without
exploration noise, for `evaluate`.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from podracer import parallel
from podracer.agents.muzero import learning, networks, search
from podracer.agents.muzero.config import MuZeroConfig
from podracer.agents.registry import Algorithm
from podracer.types import Agent, AgentState, BatchShape, DiscreteSpec, ObsSpec, PRNGKey


def make_muzero(
    config: MuZeroConfig,
    obs_spec: ObsSpec,
    action_spec: DiscreteSpec,
    *,
    num_updates: int,
    axis_name: parallel.AxisName = None,
) -> Agent:
    """Build the MuZero `Agent`.

    num_updates: how many times `update` will be called in the run (`anneal_lr`).
    axis_name:   mesh axis (or axes) to average gradients over; None on one device.
    """
    network = networks.make_network(config, obs_spec, action_spec.num_actions)
    optimizer = learning.make_optimizer(config)
    replay = learning.make_replay(config)
    example = learning.example_step(tuple(obs_spec.shape), obs_spec.dtype, action_spec.num_actions)
    act, greedy_act, _ = search.make_acting(config, network)

    def init(key: PRNGKey) -> AgentState:
        params = networks.init_params(network, key, obs_spec)
        return AgentState(params, learning.initial_learner_state(optimizer, params),
                          jnp.zeros((), jnp.int32), replay.init(example))

    update = learning.make_update(config, network, optimizer, replay, example, axis_name, num_updates)
    return Agent(init=init, act=act, update=update, greedy_act=greedy_act)


def make_prior_act(config: MuZeroConfig, obs_spec: ObsSpec, action_spec: DiscreteSpec):
    """`(params, obs, key) -> (action, {})` sampling the prediction network's policy at the
    encoded observation, no search: for benchmarks, the cost of acting without search."""
    network = networks.make_network(config, obs_spec, action_spec.num_actions)
    return search.make_acting(config, network)[2]


def without_search(agent: Agent, config: object, obs_spec: ObsSpec, action_spec: DiscreteSpec) -> Agent | None:
    """For a MuZero agent, the same agent acting with its prediction network alone
    (`make_prior_act`); None for any other agent. Benchmarks compare the two."""
    if not isinstance(config, MuZeroConfig):
        return None
    return agent._replace(act=make_prior_act(config, obs_spec, action_spec))


def _probe_config() -> MuZeroConfig:
    """Learns the discrete probe within 2 calls of the contract's (12,800 env steps): small
    networks, a short unroll, 4 sequences learned per env step from 256 env steps on."""
    return MuZeroConfig(num_simulations=4, hidden_sizes=(32,), latent_size=32, dynamics_hidden_sizes=(32,),
                        prediction_hidden_sizes=(32,), num_bins=21, value_max=5.0, unroll_steps=2, td_steps=2,
                        learning_rate=3e-3, buffer_size=4_096, batch_size=64, replay_ratio=4.0,
                        learning_starts=256, gamma=0.9)


def _exact_config(config: MuZeroConfig, batch: BatchShape) -> MuZeroConfig:
    """One gradient step on every sequence the batch holds, however it is split: sequences
    no longer than the rollout (so one update's steps hold some), learning from the first
    update, and `batch_size` the number of sequence starts in the whole batch; stratified
    sampling (`podracer.replay.sequence.stratified_starts`) of them from a device holding
    `1 / D` of the starts takes each exactly `D` times, and the loss is a mean."""
    T = batch.rollout_length
    unroll = min(config.unroll_steps, max(1, (T - 1) // 2))
    td = min(config.td_steps, max(1, T - 1 - unroll))
    starts = (T - (unroll + td + 1) + 1) * batch.envs_per_device
    return dataclasses.replace(config, unroll_steps=unroll, td_steps=td, batch_size=starts, replay_ratio=None,
                               gradient_steps=1, learning_starts=0,
                               buffer_size=max(config.buffer_size,
                                               (unroll + td + 1) * batch.transitions + batch.envs_per_device))


ALGORITHM = Algorithm(
    name="muzero", config=MuZeroConfig, make=make_muzero, check_batch=MuZeroConfig.check_batch,
    action_spaces=(DiscreteSpec,), masks=False, probe_config=_probe_config, probe_steps=12_800,
    exact_config=_exact_config,
    step_metrics=learning.STEP_METRICS,
)

__all__ = ["ALGORITHM", "MuZeroConfig", "make_muzero", "make_prior_act", "without_search"]
