"""The Anakin runner end to end: learning on 4 devices, seeds, determinism, validation."""

import dataclasses

import jax
import numpy as np
import pytest

import anakin
from anakin import AnakinConfig
from experiments.presets import PRESETS
from podracer.agents import PPOConfig
from podracer.config import Config, ConfigError, EnvConfig
from tests.support.helpers import tree_allclose


@pytest.mark.slow
@pytest.mark.optimized
@pytest.mark.timeout(240)
def test_ppo_learns_cartpole_on_4_devices():
    """The ppo-cartpole-anakin preset, unchanged, on 4 fake devices: return near 500."""
    config = PRESETS["ppo-cartpole-anakin"]()
    assert len(jax.local_devices()) == 4
    result = anakin.train(config)
    returns = [row["episode_return"] for row in result.metrics if row["episode_return"] is not None]
    assert max(returns) >= 475, returns
    assert np.mean(returns[-3:]) >= 475, returns[-3:]
    assert result.metrics[-1]["env_steps"] == 976 * 512
    # The replicas on the 4 devices hold identical parameters.
    for leaf in jax.tree.leaves(result.state.agent.params):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(shards) == 4
        for shard in shards[1:]:
            np.testing.assert_array_equal(shard, shards[0])


@pytest.mark.slow
@pytest.mark.optimized
@pytest.mark.timeout(180)
def test_eight_seeds_in_one_program_each_learn():
    preset = PRESETS["ppo-catch-anakin"]()
    config = dataclasses.replace(
        preset, total_env_steps=51_200,
        arch=dataclasses.replace(preset.arch, num_seeds=8, updates_per_call=25, devices=(0,)),
    )
    result = anakin.train(config)
    per_seed = result.metrics[-1]["episode_return_per_seed"]
    assert len(per_seed) == 8
    # A random policy scores about -0.6; each of the 8 agents catches > 95% of balls.
    assert min(per_seed) > 0.9, per_seed
    # The seeds are independent agents: their parameters differ.
    policy = np.asarray(jax.tree.leaves(result.state.agent.params)[0])
    assert not np.allclose(policy[0], policy[1])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_same_seed_same_run_and_call_split_does_not_matter():
    base = Config(env=EnvConfig("Catch"), agent=PPOConfig(num_minibatches=2), total_env_steps=8 * 16 * 7,
                  arch=AnakinConfig(num_envs=8, rollout_length=16, updates_per_call=3))
    a = anakin.train(base)
    b = anakin.train(dataclasses.replace(base, arch=dataclasses.replace(base.arch, updates_per_call=7)))
    tree_allclose(a.state, b.state, rtol=1e-6, atol=1e-6)  # agent, environments and keys
    assert [r["env_steps"] for r in a.metrics] == [384, 768, 896]


def test_sizes_are_validated_before_compiling():
    config = PRESETS["ppo-cartpole-anakin"]()
    with pytest.raises(ConfigError, match="arch.num_envs.*divisible.*4"):
        anakin.runner.setup(dataclasses.replace(config, arch=AnakinConfig(num_envs=6)))
    with pytest.raises(ConfigError, match="arch.devices"):
        anakin.runner.setup(dataclasses.replace(config, arch=AnakinConfig(devices=(7,))))
    with pytest.raises(ConfigError, match="total_env_steps"):
        anakin.runner.setup(dataclasses.replace(config, total_env_steps=100))
    with pytest.raises(ConfigError, match="env.id.*CartPole-v1"):
        anakin.runner.setup(dataclasses.replace(config, env=EnvConfig("CartPole-v2")))
    for backend in ("envpool", "gymnasium"):  # a host backend would otherwise be ignored
        with pytest.raises(ConfigError, match=f"env.backend '{backend}' chooses Sebulba's host environments"):
            anakin.runner.setup(dataclasses.replace(config, env=EnvConfig("CartPole-v1", backend=backend)))
    anakin.runner.setup(dataclasses.replace(config, env=EnvConfig("CartPole-v1", backend="jax")))


def test_rollout_step_keys_are_one_split_of_the_rollout_key():
    """`step_keys` draws a rollout's keys before its loop, in one split (cheaper on CPU):
    the documented layout, every key distinct, the same for the same key."""
    from anakin.rollout import step_keys

    key, T, B = jax.random.key(7), 5, 3
    act, env = step_keys(key, T, B)
    assert act.shape == (T,) and env.shape == (T, B)
    expected = jax.random.key_data(jax.random.split(key, T * (B + 1))).reshape(T, B + 1, -1)
    np.testing.assert_array_equal(jax.random.key_data(act), expected[:, 0])
    np.testing.assert_array_equal(jax.random.key_data(env), expected[:, 1:])
    data = np.concatenate([jax.random.key_data(act)[:, None], jax.random.key_data(env)], 1).reshape(T * (B + 1), -1)
    assert len({tuple(row) for row in data}) == T * (B + 1)
    np.testing.assert_array_equal(jax.random.key_data(step_keys(key, T, B)[1]), jax.random.key_data(env))


@pytest.mark.slow
def test_an_env_whose_step_loops_from_constants_runs_on_2_devices():
    """gymnax's Asterix-MinAtar starts a `while_loop` from constants and carries values that
    depend on the step's key: `shard_map`'s device-variance typing rejected it ("carry input
    and carry output must have equal types") until environments ran outside that typing.
    Two calls of one update of a small PPO on 2 devices."""
    config = Config(env=EnvConfig("Asterix-MinAtar"), agent=PPOConfig(num_minibatches=2, hidden_sizes=(16,)),
                    arch=AnakinConfig(num_envs=4, rollout_length=64, updates_per_call=1, devices=(0, 1)),
                    total_env_steps=2 * 4 * 64)
    result = anakin.train(config)
    assert [row["env_steps"] for row in result.metrics] == [256, 512]
    assert all(np.isfinite(row["loss"]) for row in result.metrics)
