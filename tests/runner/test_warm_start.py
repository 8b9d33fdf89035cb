"""Warm starts (`--checkpoint.init-from RUN`): a new run's agent parameters from another
run's checkpoint, across seeds, devices and architectures; counters and optimizer fresh."""

import dataclasses

import jax
import numpy as np
import pytest

import anakin
import sebulba
from anakin import AnakinConfig
from experiments import train as train_lib
from experiments.presets import PRESETS
from podracer.agents import PPOConfig, PQNConfig
from podracer.config import CheckpointConfig, Config, ConfigError, EnvConfig
from podracer.runner import Hooks
from sebulba import SebulbaConfig
from tests.support.helpers import assert_trees_equal


def _trained(tmp_path, name, config):
    """Train `config` with the command line's code, checkpointed in tmp_path/name."""
    return train_lib.train(dataclasses.replace(config, run_dir=str(tmp_path / name)), console=False)


def _warm_anakin_state(config):
    s = anakin.runner.setup(config)
    return Hooks().start(anakin.runner.initial_state(config, s), config.checkpoint.init_from, seed_axis=True)[0]


def _with_init(config, run_dir, **arch):
    return dataclasses.replace(config, checkpoint=CheckpointConfig(init_from=str(run_dir)),
                               arch=dataclasses.replace(config.arch, **arch))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_run_continues_from_another_runs_policy(tmp_path):
    """PPO that learned Catch (return ~1; a fresh policy scores ~-0.6), then a new run
    of 2 seeds on 2 devices started from it: both seeds catch from their first update,
    with the source's parameters exactly and a fresh optimizer and update count."""
    preset = PRESETS["ppo-catch-anakin"]()
    source = _trained(tmp_path, "source", dataclasses.replace(
        preset, total_env_steps=51_200, arch=dataclasses.replace(preset.arch, updates_per_call=25, devices=(0,))))
    assert source.metrics[-1]["episode_return"] > 0.9

    config = _with_init(dataclasses.replace(preset, total_env_steps=4 * 1024), tmp_path / "source",
                        num_seeds=2, devices=(0, 1), updates_per_call=1)
    start = _warm_anakin_state(config)
    fresh = anakin.runner.initial_state(config, anakin.runner.setup(config))
    for seed in range(2):
        assert_trees_equal(jax.tree.map(lambda x: np.asarray(x)[seed], start.agent.params),
                           jax.tree.map(lambda x: np.asarray(x)[0], source.state.agent.params))
    assert_trees_equal(start.agent.opt_state, fresh.agent.opt_state)
    assert int(np.asarray(start.agent.update_count).max()) == 0

    warm = train_lib.train(dataclasses.replace(config, run_dir=str(tmp_path / "warm")), console=False)
    assert min(warm.metrics[0]["episode_return_per_seed"]) > 0.8, warm.metrics[0]
    cold = anakin.train(dataclasses.replace(config, checkpoint=CheckpointConfig()))
    assert max(cold.metrics[0]["episode_return_per_seed"]) < 0.0, cold.metrics[0]


@pytest.mark.costly
def test_seeds_pair_up_and_integer_leaves_start_fresh(tmp_path):
    """PQN's parameters hold its env-step counter (the epsilon schedule's position): the
    Q-network comes from the source, the counter starts at zero. A source of 2 seeds into
    a run of 2 seeds: seed k from seed k."""
    config = Config(env=EnvConfig("Catch"), total_env_steps=4 * 8 * 16,
                    agent=PQNConfig(num_minibatches=2, num_epochs=1, hidden_sizes=(16,)),
                    arch=AnakinConfig(num_envs=8, rollout_length=16, num_seeds=2, updates_per_call=4, devices=(0,)))
    source = _trained(tmp_path, "source", config).state.agent.params
    assert int(np.asarray(source.env_steps.lo).max()) > 0

    start = _warm_anakin_state(_with_init(config, tmp_path / "source", devices=(0, 1, 2, 3))).agent.params
    assert_trees_equal(jax.tree.map(np.asarray, start.online), jax.tree.map(np.asarray, source.online))
    assert not np.allclose(np.asarray(jax.tree.leaves(start.online)[0][0]), np.asarray(jax.tree.leaves(start.online)[0][1]))
    assert all(int(np.asarray(leaf).max()) == 0 for leaf in jax.tree.leaves(start.env_steps))


@pytest.mark.costly
def test_sebulba_starts_from_an_anakin_run(tmp_path):
    """The same agent on CartPole: an Anakin run's parameters (seed axis) start a Sebulba
    learner (none), replicated over its 2 learner devices."""
    anakin_config = dataclasses.replace(PRESETS["ppo-cartpole-anakin"](), total_env_steps=2 * 512)
    source = _trained(tmp_path, "source", dataclasses.replace(
        anakin_config, arch=dataclasses.replace(anakin_config.arch, updates_per_call=2, devices=(0,))))
    config = dataclasses.replace(
        anakin_config, checkpoint=CheckpointConfig(init_from=str(tmp_path / "source")),
        arch=SebulbaConfig(num_envs=4, rollout_length=128, actor_devices=(0,), learner_devices=(1, 2)))
    s = sebulba.runner.setup(config)
    start, _ = Hooks().start(sebulba.runner.initial_learner_state(config, s), config.checkpoint.init_from)
    for leaf, expected in zip(jax.tree.leaves(start.agent.params), jax.tree.leaves(source.state.agent.params)):
        assert len(leaf.addressable_shards) == 2
        for shard in leaf.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(expected)[0])


@pytest.mark.costly
def test_a_source_that_does_not_fit_is_refused_before_the_run_starts(tmp_path):
    config = Config(env=EnvConfig("Catch"), total_env_steps=8 * 16, agent=PPOConfig(num_minibatches=2),
                    arch=AnakinConfig(num_envs=8, rollout_length=16, devices=(0,)))
    _trained(tmp_path, "source", config)
    other = dataclasses.replace(config, agent=PPOConfig(num_minibatches=2, hidden_sizes=(32,)),
                                checkpoint=CheckpointConfig(init_from=str(tmp_path / "source")),
                                run_dir=str(tmp_path / "other"))
    with pytest.raises(ConfigError, match=r"checkpoint.init_from: the agent parameters in .* do not fit"):
        train_lib.train(other, console=False)
    missing = dataclasses.replace(other, checkpoint=CheckpointConfig(init_from=str(tmp_path / "nothing")))
    with pytest.raises(ConfigError, match=r"checkpoint.init_from: no checkpoint in"):
        train_lib.train(missing, console=False)
    assert not (tmp_path / "other").exists()
    with pytest.raises(ConfigError, match="checkpoint.init_from"):
        CheckpointConfig(init_from="")
