"""The replay agents' updates against the independent references of
`tests.support.reference_updates`: DQN's gradient step on a given weighted sample (1 and 4
devices) and its whole update with the contract's exact config (the trajectory into the
buffer, every transition sampled alike, one step), SAC's critics, actor and target critics
with the exact config, on one device, Sebulba's learner step on 4 devices and (DQN) Anakin's
program. Their optimizers start from states with moments (`warm`): from a fresh state Adam's
first step is about `lr sign(g)`, blind to a bug that only rescales a gradient.

Without `-m slow`: DQN's gradient step on 1 and 4 devices, its whole update and SAC's on one.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from podracer import parallel
from podracer.agents import DQNConfig, algorithms, make_agent
from podracer.agents.dqn import DQNLearnerState, make_learn_on_batch, make_optimizer, make_q_network
from podracer.counters import Count
from podracer.replay import ReplaySample, Transition
from podracer.types import BatchShape, BoxSpec, Trajectory
from sebulba.learner import AXIS
from tests.support import reference_updates as reference
from tests.support.update_paths import (
    ACTION_SPEC,
    NUM_UPDATES,
    OBS,
    OBS_SPEC,
    A,
    B,
    T,
    anakin_update,
    assert_same_update,
    sebulba_update,
    trajectory,
    transitions,
    warm,
)

pytestmark = pytest.mark.timeout(240)


DQN = DQNConfig(
    learning_rate=1e-2,
    max_grad_norm=0.3,
    gamma=0.9,
    loss="huber",
    huber_delta=0.5,
    target_update_period=1,
    target_update_tau=0.3,
    hidden_sizes=(8,),
)


def dqn_sample(key, N: int = 16) -> ReplaySample:
    keys = jax.random.split(key, 6)
    obs, next_obs = jax.random.normal(keys[0], (N, OBS)), jax.random.normal(keys[1], (N, OBS))
    action = jax.random.randint(keys[2], (N,), 0, A)
    reward = jax.random.normal(keys[3], (N,)) * 2.0  # TD errors beyond huber_delta, and within
    discount = DQN.gamma * jax.random.bernoulli(keys[4], 0.8, (N,)).astype(jnp.float32)
    weights = jax.random.uniform(keys[5], (N,), minval=0.2, maxval=1.0)
    return ReplaySample(Transition(obs, action, reward, discount, next_obs), jnp.arange(N), weights)


@pytest.mark.parametrize("num_devices, double_q", [(1, True), (4, True), (1, False)])
@pytest.mark.costly
def test_dqn_gradient_step_equals_the_reference(num_devices, double_q):
    """One gradient step on a given weighted sample, with a target network of its own (so
    Double DQN's selection matters), then a Polyak target update."""
    config = dataclasses.replace(DQN, double_q=double_q)
    network, optimizer = make_q_network(config, OBS_SPEC, ACTION_SPEC), make_optimizer(config)
    online = network.init(jax.random.key(0), jnp.zeros((1, OBS)))
    target = network.init(jax.random.key(1), jnp.zeros((1, OBS)))
    opt_state = warm(reference.dqn_optimizer(config), online, jax.random.key(4))
    learner = DQNLearnerState(opt_state, target, Count.zeros(), jnp.zeros(()), Count.zeros())
    sample = dqn_sample(jax.random.key(2))
    if num_devices == 1:
        step = jax.jit(make_learn_on_batch(config, network, optimizer, None))
    else:
        mesh = parallel.make_mesh(jax.devices()[:num_devices], AXIS)
        learn = make_learn_on_batch(config, network, optimizer, AXIS)
        step = jax.jit(
            jax.shard_map(
                lambda o, lr, s: learn(o, lr, s)[:2], mesh=mesh, in_specs=(P(), P(), P(AXIS)), out_specs=(P(), P())
            )
        )
    got_online, got_learner = step(online, learner, sample)[:2]
    expected_online, expected_target, _ = reference.dqn_step(
        config, online, target, opt_state, 0, sample.items, sample.weights
    )
    assert_same_update(got_online, expected_online, online)
    assert_same_update(got_learner.target, expected_target, target)


@pytest.mark.parametrize("path", ["one_device", pytest.param("sebulba_4_devices", marks=pytest.mark.slow)])
@pytest.mark.costly
def test_dqn_update_equals_the_reference(path):
    """The whole update with the contract's exact config: the trajectory into the buffer,
    its 1-step transitions (no bootstrap past a termination, a time limit's from its final
    observation) sampled each the same number of times, one gradient step."""
    algorithm = algorithms()["dqn"]
    config = algorithm.exact_config(DQN, BatchShape(T, B))
    one = make_agent(config, OBS_SPEC, ACTION_SPEC, num_updates=NUM_UPDATES, axis_name=None)
    state = jax.jit(one.init)(jax.random.key(0))
    opt_state = warm(reference.dqn_optimizer(config), state.params.online, jax.random.key(4))
    state = state.replace(opt_state=state.opt_state._replace(optimizer=opt_state))
    traj = trajectory(one.act, state.params, jax.random.key(2))
    if path == "one_device":
        got, metrics = jax.jit(one.update)(state, traj, jax.random.key(3))
    else:
        four = make_agent(config, OBS_SPEC, ACTION_SPEC, num_updates=NUM_UPDATES, axis_name=AXIS)
        got, metrics, _ = sebulba_update(four, state, traj, jax.random.key(3))
    expected, loss = dqn_update_reference(config, state, jax.device_get(traj))
    assert_same_update(got.params.online, expected, state.params.online)
    np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-4, atol=1e-6)


def dqn_update_reference(config: DQNConfig, state, traj: Trajectory):
    """The reference's one step on all of `traj`'s transitions, each weighted 1."""
    batch = transitions(config.gamma, traj)
    online, _, loss = reference.dqn_step(
        config,
        state.params.online,
        state.opt_state.target,
        state.opt_state.optimizer,
        0,
        batch,
        np.ones(batch[2].shape, np.float32),
    )
    return online, loss


@pytest.mark.slow
def test_anakin_dqn_update_equals_the_reference():
    """Anakin's rollout and DQN's update compiled together, on Catch."""
    config = algorithms()["dqn"].exact_config(DQN, BatchShape(T, 4))
    before, traj, _, after, _, _ = anakin_update(config, "Catch")
    expected, _ = dqn_update_reference(config, before, traj)
    assert_same_update(after.params.online, expected, before.params.online)


@pytest.mark.parametrize("path", ["one_device", pytest.param("sebulba_4_devices", marks=pytest.mark.slow)])
@pytest.mark.costly
def test_sac_update_equals_the_reference(path):
    """SAC with the contract's exact config (temperature 0, a policy of negligible spread, one
    step on all of the trajectory's transitions): critics, actor and target critics. Actions
    in a box that is not `[-1, 1]`, target critics off the critics, optimizers with moments."""
    algorithm = algorithms()["sac"]
    config = dataclasses.replace(
        algorithm.exact_config(algorithm.default_probe_config(), BatchShape(T, B)), hidden_sizes=(8, 8), tau=0.3
    )
    low, high = np.array([-2.0, -1.0], np.float32), np.array([1.0, 3.0], np.float32)
    action_spec = BoxSpec((2,), low, high)
    one = make_agent(config, OBS_SPEC, action_spec, num_updates=NUM_UPDATES, axis_name=None)
    state = jax.jit(one.init)(jax.random.key(0))
    other = jax.jit(one.init)(jax.random.key(1)).opt_state.critic
    actor_optimizer, critic_optimizer = reference.sac_optimizers(config)
    opt_states = (
        warm(actor_optimizer, state.params.actor, jax.random.key(4)),
        warm(critic_optimizer, state.opt_state.critic, jax.random.key(5)),
    )
    state = state.replace(
        opt_state=state.opt_state._replace(
            target_critic=other, actor_optimizer=opt_states[0], critic_optimizer=opt_states[1]
        )
    )
    traj = trajectory(
        lambda params, obs, key: (jax.random.uniform(key, (obs.shape[0], 2), minval=low, maxval=high), {}),
        None,
        jax.random.key(2),
    )
    if path == "one_device":
        got, metrics = jax.jit(one.update)(state, traj, jax.random.key(3))
    else:
        four = make_agent(config, OBS_SPEC, action_spec, num_updates=NUM_UPDATES, axis_name=AXIS)
        got, metrics, _ = sebulba_update(four, state, traj, jax.random.key(3))
    learner = state.opt_state
    actor, critic, target, loss = reference.sac_deterministic_step(
        config,
        state.params.actor,
        learner.critic,
        learner.target_critic,
        opt_states,
        transitions(config.gamma, jax.device_get(traj)),
        low,
        high,
    )
    assert_same_update(got.opt_state.critic, critic, learner.critic)
    assert_same_update(got.params.actor, actor, state.params.actor)
    assert_same_update(got.opt_state.target_critic, target, learner.target_critic)
    np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-4, atol=1e-6)
