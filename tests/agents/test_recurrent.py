"""Recurrent agents: where the core state is reset, in acting (both architectures) and in the
learner's unroll, against running the network separately on each episode.

The oracle cuts every environment's column of a trajectory into its episodes (terminated
and truncated alike, at the first and last steps too) and runs the network step by step on
each from the initial state; the first episode of a column goes on from the state the
trajectory carries (`Trajectory.core`). The learner's values of `obs` and `next_obs` (a
truncated step's final observation read by the episode it ends) and the actor's own values
must all equal it.
"""

from __future__ import annotations

import queue
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anakin.rollout import reset_envs, rollout
from podracer import parallel
from podracer.agents.acting import CATEGORICAL
from podracer.agents.actor_critic import make_actor_critic_model
from podracer.config import EnvConfig
from podracer.envs import make_configured_jax_env, make_jax_env
from podracer.types import Agent
from sebulba.actor import Actor, make_policy_step
from sebulba.learner import trajectory_sharding
from sebulba.params import ParamSource

pytestmark = pytest.mark.timeout(120)

INITIAL = 99  # the counting agent's initial core state


def counting_agent() -> Agent:
    """A recurrent policy whose core state counts the observations read in this episode."""

    def act(params, obs, key, core, start):
        core = jnp.where(start, 0, core) + 1
        return jnp.zeros_like(core), {"value": core.astype(jnp.float32)}, core

    return Agent(init=None, act=act, update=None, initial_core=lambda batch: jnp.full((batch,), INITIAL, jnp.int32))


@pytest.mark.parametrize("env_id, length", [("ProbeDiscounting", 2), ("ProbeTimeLimit", 4)])
def test_anakin_rollout_resets_the_core_at_every_episode_start(env_id, length):
    """Two rollouts of 5 steps on a probe whose episodes last `length` steps (terminated,
    or truncated by a time limit): the core read exactly the observations of the current
    episode at every step, across the rollout boundary; `start` marks episode starts and
    each trajectory carries the state it began from (the initial one first)."""
    env, agent, T, B = make_jax_env(env_id), counting_agent(), 5, 3

    @jax.jit
    def two_rollouts(key):
        carry = reset_envs(env, None, key, B, agent)
        carry, first, _ = rollout(env, None, agent, None, carry, key, T)
        _, second, _ = rollout(env, None, agent, None, carry, key, T)
        return first, second

    for r, traj in enumerate(two_rollouts(jax.random.key(0))):
        k = (r * T + np.arange(T)[:, None]) % length  # observations of this episode before the step
        np.testing.assert_array_equal(traj.extras["value"], np.broadcast_to(k + 1, (T, B)))
        np.testing.assert_array_equal(traj.start, np.broadcast_to(k == 0, (T, B)))
        before = INITIAL if r == 0 else (T - 1) % length + 1
        np.testing.assert_array_equal(traj.core, np.full((1, B), before))


# CartPole with a time limit of 12 steps: a random policy's episodes end by termination
# (often within 12 steps) and by truncation, at any step of a rollout.
ENV = EnvConfig("CartPole-v1", params=("max_steps_in_episode=12",))
T, B = 24, 6


def model_and_params():
    env = make_configured_jax_env(ENV)
    spec = env.observation_spec(env.default_params), env.action_spec(env.default_params)
    model = make_actor_critic_model("mlp", (8,), "tanh", False, *spec, CATEGORICAL, core="lstm", core_size=5)
    return model, model.init(jax.random.key(0))


def agent_of(model) -> Agent:
    return Agent(init=None, act=model.act, update=None, initial_core=model.initial_core)


def per_episode_oracle(model, params, traj):
    """`(value [T, B], next_value [T, B])` from running each episode of each column on its
    own, step by step from the initial state (or from `traj.core` for a column's first one)."""

    step = jax.jit(lambda state, obs, start: _step(model, params, state, obs, start))
    value, next_value = np.zeros((T, B)), np.zeros((T, B))
    obs, next_obs, start = (np.asarray(x) for x in (traj.obs, traj.next_obs, traj.start))
    for b in range(B):
        state = jax.tree.map(lambda x: x[0, b:b + 1], traj.core)
        for t in range(T):
            if start[t, b]:
                state = model.initial_core(1)  # a new episode: nothing of the last one
            after, value[t, b] = step(state, obs[t, b:b + 1], jnp.zeros(1, bool))
            next_value[t, b] = step(after, next_obs[t, b:b + 1], jnp.zeros(1, bool))[1]
            state = after
    return value, next_value


def _step(model, params, state, obs, start):
    """One step of the model's network with no reset, through its acting function."""
    _, extras, state = model.act(params, obs, jax.random.key(0), state, start)
    return state, extras["value"][0]


def check_against_oracle(model, params, traj):
    assert np.asarray(traj.start)[1:].any() and np.asarray(traj.truncated).any() and np.asarray(traj.terminated).any()
    value, next_value = per_episode_oracle(model, params, traj)
    _, got_value, got_next = jax.jit(model.outputs)(params, traj)
    np.testing.assert_allclose(got_value, value, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_next, next_value, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(traj.extras["value"], value, rtol=1e-5, atol=1e-5)  # the actor's own


@pytest.mark.costly
def test_learner_unroll_equals_each_episode_on_an_anakin_trajectory():
    """Anakin: the second rollout (starting mid-episode, from a carried core state)."""
    model, params = model_and_params()
    env, agent = make_configured_jax_env(ENV), agent_of(model)

    @jax.jit
    def second_rollout(key):
        carry = reset_envs(env, env.default_params, key, B, agent)
        carry, _, _ = rollout(env, env.default_params, agent, params, carry, key, T)
        return rollout(env, env.default_params, agent, params, carry, jax.random.fold_in(key, 1), T)[1]

    check_against_oracle(model, params, jax.device_get(second_rollout(jax.random.key(3))))


@pytest.mark.costly
def test_learner_unroll_equals_each_episode_on_a_sebulba_trajectory():
    """Sebulba: an actor thread on the same environment stepped on the host; its second
    rollout goes on from the core state the actor kept."""
    model, params = model_and_params()
    agent = agent_of(model)
    source = ParamSource(jax.devices()[0])
    source.publish(params, 2)
    out: queue.Queue = queue.Queue(2)
    actor = Actor(index=0, env_config=EnvConfig(ENV.id, backend="jax", params=ENV.params), num_envs=B, seed=0,
                  env_threads=1, rollout_length=T, max_policy_lag=0, policy_step=make_policy_step(agent),
                  params=source, agent=agent, out=out,
                  sharding=trajectory_sharding(parallel.make_mesh(jax.devices()[1:3], "learner")), num_rollouts=2)
    actor.run(threading.Event())
    out.get_nowait()
    check_against_oracle(model, params, jax.device_get(out.get_nowait().trajectory))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_anakin_resume_with_recurrent_state_is_exact(tmp_path):
    """A recurrent PPO run on 4 devices, stopped after one host call and resumed, ends bit for
    bit where the uninterrupted run does: the core states and start flags are part of the
    runner state, checkpointed with the environments (sharded over the devices as they are)."""
    import dataclasses

    from experiments import train as train_lib
    from tests.support.helpers import TINY, assert_trees_equal, comparable, read_rows

    config = dataclasses.replace(TINY, agent=dataclasses.replace(TINY.agent, core="gru", core_size=8),
                                 arch=dataclasses.replace(TINY.arch, num_seeds=1),
                                 total_env_steps=TINY.total_env_steps // 2)
    full = train_lib.train(dataclasses.replace(config, run_dir=str(tmp_path / "full")))
    stops = iter([False, True])
    first = train_lib.train(dataclasses.replace(config, run_dir=str(tmp_path / "stopped")),
                            should_stop=lambda: next(stops, True))
    assert first.stopped
    last = train_lib.resume(str(tmp_path / "stopped"))
    assert last.state.envs.core.sharding.spec == jax.sharding.PartitionSpec(None, "device")
    assert_trees_equal(last.state, full.state)
    assert comparable(read_rows(tmp_path / "stopped")) == comparable(full.metrics)
