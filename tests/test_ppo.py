"""PPO's learning machinery on probe environments, through the Anakin runner."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anakin import AnakinConfig, train
from podracer.agents import PPOConfig
from podracer.agents import common
from podracer.config import Config, ConfigError, EnvConfig
from podracer.types import BatchShape, DiscreteSpec, ObsSpec

FAST = PPOConfig(learning_rate=3e-3, anneal_lr=False, num_minibatches=2, num_epochs=4, entropy_coef=0.0,
                 hidden_sizes=(16,), gamma=0.9)


def train_probe(env_id, agent=FAST, steps=20_000):
    config = Config(env=EnvConfig(env_id), agent=agent, total_env_steps=steps,
                    arch=AnakinConfig(num_envs=16, rollout_length=8, devices=(0,), updates_per_call=50))
    result = train(config)
    return result, jax.tree.map(lambda x: x[0], result.state.agent.params)


def values_and_probs(params, obs):
    net = common.make_actor_critic("mlp", FAST.hidden_sizes, FAST.activation, False, ObsSpec((1,), jnp.float32),
                                   DiscreteSpec(2))
    logits, value = jax.jit(net.apply)(params, jnp.asarray(obs, jnp.float32))
    return np.asarray(value), np.asarray(jax.nn.softmax(logits))


@pytest.mark.timeout(120)
def test_value_learns_constant_reward():
    _, params = train_probe("ProbeConstantReward", steps=10_000)
    value, _ = values_and_probs(params, [[0.0]])
    np.testing.assert_allclose(value, [1.0], atol=0.1)


@pytest.mark.timeout(120)
def test_value_learns_discounting():
    _, params = train_probe("ProbeDiscounting", steps=20_000)
    value, _ = values_and_probs(params, [[0.0], [1.0]])
    np.testing.assert_allclose(value, [0.9, 1.0], atol=0.1)


@pytest.mark.timeout(120)
def test_policy_learns_observation_dependent_action():
    result, params = train_probe("ProbeActionReward", steps=20_000)
    _, probs = values_and_probs(params, [[-1.0], [1.0]])
    assert probs[0, 0] > 0.9 and probs[1, 1] > 0.9
    assert result.metrics[-1]["episode_return"] > 0.8


def test_bad_hyperparameters_name_the_field():
    with pytest.raises(ConfigError, match="agent.learning_rate"):
        PPOConfig(learning_rate=-1.0)
    with pytest.raises(ConfigError, match="agent.gamma"):
        PPOConfig(gamma=1.5)
    with pytest.raises(ConfigError, match="agent.num_minibatches"):
        PPOConfig(num_minibatches=3).check_batch(BatchShape(16, 8))
    with pytest.raises(ConfigError, match="agent.torso"):
        dataclasses.replace(PPOConfig(), torso="transformer")


@pytest.mark.parametrize("truncate", [False, True])
def test_successor_values_equal_a_forward_pass_over_next_obs(truncate):
    """GAE's bootstrap values: behaviour values of obs[t + 1] where the episode went on, the
    network's on the last step and on truncated steps (terminated ones do not bootstrap)."""
    from podracer.agents.ppo import successor_values
    from podracer.types import Trajectory

    T, B = 5, 3
    net = common.make_actor_critic("mlp", (8,), "tanh", False, ObsSpec((2,), jnp.float32), DiscreteSpec(2))
    params = net.init(jax.random.key(0), jnp.zeros((1, 2)))
    rng = np.random.default_rng(0)
    states = rng.standard_normal((T + 1, B, 2)).astype(np.float32)
    obs, next_obs = states[:-1], states[1:].copy()
    truncated = np.zeros((T, B), bool)
    if truncate:  # env 1 hit its time limit at t = 2: next_obs[2] is its final observation, obs[3] a reset
        truncated[2, 1] = True
        next_obs[2, 1] = rng.standard_normal(2)
    _, value = common.apply_time_major(net, params, jnp.asarray(obs))
    traj = Trajectory(obs, np.zeros((T, B), np.int32), np.zeros((T, B), np.float32), np.zeros((T, B), bool),
                      truncated, next_obs, {"value": value})
    _, expected = common.apply_time_major(net, params, jnp.asarray(next_obs))
    np.testing.assert_allclose(jax.jit(successor_values, static_argnums=0)(net, params, traj), expected,
                               rtol=1e-5, atol=1e-6)
