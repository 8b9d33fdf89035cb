"""Sebulba: validation, the learner against Anakin's, learning CartPole on 4 devices."""

from __future__ import annotations

import dataclasses

import pytest

from experiments.presets import all_presets
from experiments.presets_ppo import ppo_cartpole_sebulba
from podracer.agents import PPOConfig
from podracer.config import Config, ConfigError, EnvConfig
from sebulba import SebulbaConfig, setup, train
from sebulba.layout import device_indices
from tests.support.helpers import assert_solved_for_a_stretch

TIMING_KEYS = (
    "actor_env_wait_s", "actor_inference_s", "actor_param_wait_s", "actor_queue_wait_s",
    "learner_wait_s", "learner_update_s", "queue_depth", "policy_lag", "policy_lag_max",
)


def small_config(**arch) -> Config:
    """A quick CartPole config: 12 envs x 16 steps per update."""
    defaults = dict(num_envs=12, rollout_length=16, updates_per_log=5)
    return Config(
        env=EnvConfig("CartPole-v1"),
        agent=PPOConfig(num_minibatches=2, num_epochs=2, hidden_sizes=(16, 16)),
        arch=SebulbaConfig(**{**defaults, **arch}),
        total_env_steps=12 * 16 * 20,
    )


@pytest.mark.timeout(30)
def test_presets_are_valid_configs():
    sebulba_presets = [name for name in all_presets() if name.endswith("-sebulba")]
    assert "ppo-pong-sebulba" in sebulba_presets
    for name in sebulba_presets:
        assert isinstance(all_presets()[name]().arch, SebulbaConfig), name
    setup(ppo_cartpole_sebulba())  # the default layout on 4 devices: 1 actor, 3 learners


@pytest.mark.timeout(30)
def test_default_device_layouts():
    assert device_indices(SebulbaConfig(), 1) == ((0,), (0,))
    assert device_indices(SebulbaConfig(), 4) == ((0,), (1, 2, 3))
    assert device_indices(SebulbaConfig(actor_devices=(0, 1)), 4) == ((0, 1), (2, 3))
    assert device_indices(SebulbaConfig(learner_devices=(3,)), 4) == ((0,), (3,))
    assert device_indices(SebulbaConfig(actor_devices=(0,), learner_devices=(0,)), 4) == ((0,), (0,))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("change, field", [
    (dict(actor_devices=(7,)), "arch.actor_devices"),
    (dict(learner_devices=(1, 9)), "arch.learner_devices"),
    (dict(num_envs=8), "arch.num_envs"),  # 8 envs do not split over 3 learner devices
    (dict(num_envs=6, actor_devices=(0, 1), learner_devices=(2, 3), threads_per_actor_device=2), "arch.num_envs"),
])
def test_bad_layouts_are_config_errors_before_compiling(change, field):
    with pytest.raises(ConfigError, match=field):
        setup(dataclasses.replace(small_config(), arch=dataclasses.replace(small_config().arch, **change)))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("change, field", [
    (dict(rollout_length=0), "arch.rollout_length"), (dict(max_policy_lag=-1), "arch.max_policy_lag"),
    (dict(queue_size=0), "arch.queue_size"), (dict(actor_devices=(1, 1)), "arch.actor_devices"),
    (dict(threads_per_actor_device=0), "arch.threads_per_actor_device"),
])
def test_sebulba_config_errors_name_the_field(change, field):
    with pytest.raises(ConfigError, match=field):
        SebulbaConfig(**change)


@pytest.mark.timeout(30)
def test_unknown_env_and_batch_errors():
    with pytest.raises(ConfigError, match="env.id.*CartPole-v1"):
        setup(dataclasses.replace(small_config(), env=EnvConfig("CartPol-v1")))
    with pytest.raises(ConfigError, match="total_env_steps"):
        setup(dataclasses.replace(small_config(), total_env_steps=100))
    with pytest.raises(ConfigError, match="agent.num_minibatches"):
        setup(dataclasses.replace(small_config(), agent=PPOConfig(num_minibatches=3)))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_policy_lag_one_runs_ahead_and_is_reported():
    result = train(small_config(max_policy_lag=1, actor_devices=(0, 1), learner_devices=(2, 3)))
    rows = result.metrics
    assert [r["env_steps"] for r in rows] == [960, 1920, 2880, 3840]
    for row in rows:
        assert {"env_steps", "sps", "wall_s", "episode_return", "loss"} <= row.keys()
        assert all(key in row for key in TIMING_KEYS)
        assert 0 <= row["policy_lag"] <= row["policy_lag_max"] <= 1
    assert max(r["policy_lag_max"] for r in rows) == 1  # actors did run one version ahead
    assert int(result.state.update_count) == 20


@pytest.mark.slow
@pytest.mark.optimized
@pytest.mark.timeout(180)
def test_ppo_cartpole_sebulba_learns_on_four_devices():
    """1 actor device, 3 learner devices (the default layout on 4), on-policy."""
    config = ppo_cartpole_sebulba()
    config = dataclasses.replace(config, total_env_steps=200_000,
                                 agent=dataclasses.replace(config.agent, learning_rate=1e-3))
    assert setup(config).mesh.devices.size == 3
    rows = train(config).metrics
    assert all(r["policy_lag_max"] == 0 for r in rows)
    assert_solved_for_a_stretch(rows, threshold=475)  # 4 rows: 30k env steps

