"""DQN under Sebulba: a replay buffer per learner device, the learner against Anakin's,
the replay ratio logged, the presets."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.presets_dqn import DQN_PRESETS
from podracer import parallel
from podracer.agents import DQNConfig
from podracer.agents.dqn import Step
from podracer.config import Config, EnvConfig
from podracer.replay import make_replay
from sebulba import SebulbaConfig, setup, train
from sebulba.learner import device_keys, make_update_step, state_specs, trajectory_sharding
from tests.support.helpers import assert_buffers_per_device_and_params_replicated, tree_allclose


def place(state, mesh):
    """A learner state on `mesh` as the Sebulba runner places it."""
    return jax.tree.map(lambda x, spec: parallel.shard(x, mesh, spec), state, state_specs(state))


def random_steps(seed: int, n: int) -> Step:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 4)).astype(np.float32)
    return Step(obs, rng.integers(0, 2, n).astype(np.int32), rng.normal(size=n).astype(np.float32),
                rng.uniform(size=n) < 0.1, rng.uniform(size=n) < 0.1, rng.normal(size=(n, 4)).astype(np.float32),
                rng.uniform(size=n) < 0.1)


@pytest.mark.timeout(30)
def test_presets_are_valid_and_never_block_actors_on_the_learner():
    for name in ("dqn-cartpole-sebulba", "dqn-breakout-sebulba"):
        config = DQN_PRESETS[name]()
        assert isinstance(config.arch, SebulbaConfig) and isinstance(config.agent, DQNConfig), name
        assert config.arch.max_policy_lag >= 1 and config.agent.replay_ratio is not None, name
    setup(DQN_PRESETS["dqn-cartpole-sebulba"]())  # the default layout on 4 devices: 1 actor, 3 learners


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_learner_update_matches_anakin():
    """The same DQN agent, state (a different pre-filled prioritized buffer per device, some
    replay credit carried), trajectory and keys: Anakin's program and the Sebulba learner
    give the same parameters, learner state and buffers (2 learner devices each)."""
    from anakin import runner as anakin_runner
    from anakin.config import AnakinConfig
    from anakin.program import iteration_keys, make_train_call
    from anakin.program import state_specs as anakin_specs
    from anakin.rollout import rollout

    agent_config = DQNConfig(buffer_size=64, batch_size=8, replay_ratio=1.25, learning_starts=0, n_step=2,
                             prioritized=True, target_update_period=2, hidden_sizes=(16,))
    config = Config(env=EnvConfig("CartPole-v1"), agent=agent_config, total_env_steps=4 * 8 * 10,
                    arch=AnakinConfig(num_envs=4, rollout_length=8, devices=(0, 1), updates_per_call=1))
    a = anakin_runner.setup(config)
    state = jax.device_get(anakin_runner.initial_state(config, a))
    replay = make_replay(agent_config.buffer_size, agent_config.batch_size, prioritized=True)
    add = jax.jit(replay.add)
    buffers = [add(jax.tree.map(lambda x: x[0, d], state.agent.local), random_steps(d, 24 + 8 * d))
               for d in range(2)]
    # 16 transitions per device earn 2.5 steps; with 0.5 carried, this update takes 3 (the cap).
    learner = state.agent.opt_state._replace(replay_credit=np.full((1,), 0.5, np.float32))
    state = state._replace(agent=state.agent.replace(
        opt_state=learner, local=jax.tree.map(lambda *xs: np.stack(xs)[None], *jax.device_get(buffers))))
    agent_state = jax.tree.map(lambda x: x[0], state.agent)

    trajectories, update_keys = [], []
    for d in range(2):  # Anakin's first iteration on device d, on its half of the envs
        _, rollout_key, update_key = iteration_keys(state.key[0, d])
        envs = jax.tree.map(lambda x: x[0, 2 * d: 2 * d + 2], state.envs)
        trajectories.append(rollout(a.env, a.env_params, a.agent, agent_state.params, envs, rollout_key, 8)[1])
        update_keys.append(update_key)
    trajectory = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *trajectories)

    placed = jax.tree.map(lambda x, spec: parallel.shard(x, a.mesh, spec), state, anakin_specs(state))
    anakin_state, _ = make_train_call(a.env, a.env_params, a.agent, a.mesh, 8)(placed, np.int32(1))

    s = setup(dataclasses.replace(config, arch=SebulbaConfig(
        num_envs=4, rollout_length=8, actor_devices=(2,), learner_devices=(0, 1))))
    keys = jax.device_put(jnp.stack(update_keys), device_keys(jax.random.key(0), s.mesh).sharding)
    sebulba_state, metrics = make_update_step(s.agent, s.mesh)(
        place(agent_state, s.mesh), (jax.device_put(trajectory, trajectory_sharding(s.mesh)),), keys)

    expected = jax.tree.map(lambda x: x[0], jax.device_get(anakin_state.agent))
    got = jax.device_get(sebulba_state)
    assert int(got.opt_state.gradient_steps) == 3 and float(metrics["gradient_steps"]) == 3.0
    tree_allclose(got, expected, rtol=1e-5, atol=1e-6)  # params, learner state and both buffers
    assert not np.array_equal(got.local.experience.obs[0], got.local.experience.obs[1])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_dqn_on_four_devices_keeps_a_buffer_per_learner_device():
    """1 actor device, 3 learner devices, actors one version ahead: each learner device fills
    its own buffer from its shard of the envs, parameters stay replicated, and the logged
    replay ratio is the configured one."""
    config = Config(
        env=EnvConfig("CartPole-v1"), total_env_steps=48 * 20,
        agent=DQNConfig(buffer_size=512, batch_size=16, replay_ratio=2.5, learning_starts=96, hidden_sizes=(16,)),
        arch=SebulbaConfig(num_envs=6, rollout_length=8, max_policy_lag=1, actor_devices=(0,),
                           learner_devices=(1, 2, 3), updates_per_log=5),
    )
    result = train(config)
    rows, state = result.metrics, result.state
    assert [r["env_steps"] for r in rows] == [240, 480, 720, 960]
    assert all(r["policy_lag_max"] <= 1 for r in rows)
    assert rows[-1]["replay_ratio"] == pytest.approx(2.5)
    assert rows[-1]["replay_ratio_achieved"] == pytest.approx(2.5, rel=0.1)
    # 19 learning updates (the first brings 48 < 96 env steps) of 8 * 2 transitions per
    # device earn 2.5 steps each: 47 steps taken, half a step carried.
    assert int(state.opt_state.gradient_steps) == 47 and float(state.opt_state.replay_credit) == 0.5

    obs = state.local.experience.obs
    assert obs.shape == (3, 1, 512, 4) and len(obs.sharding.device_set) == 3
    assert np.asarray(state.local.current_index).tolist() == [20 * 16] * 3
    assert_buffers_per_device_and_params_replicated(state, held=320)
