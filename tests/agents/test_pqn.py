"""PQN: config, registry, multi-device correctness, targets in the agent, learning on probes
and Catch (Anakin), and a run under Sebulba."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import anakin
from anakin import AnakinConfig
from podracer.agents import PQNConfig, algorithm_for, algorithms, make_agent, pqn
from podracer.config import Config, ConfigError, EnvConfig
from podracer.types import BatchShape, BoxSpec, DiscreteSpec, ObsSpec
from tests.support.helpers import random_trajectory

OBS_SPEC, ACTION_SPEC = ObsSpec((4,), jnp.float32), DiscreteSpec(3)


def test_config_errors_name_the_field():
    for field, value in [("learning_rate", 0.0), ("optimizer", "sgd"), ("gamma", 1.5), ("q_lambda", -0.1),
                         ("epsilon_end", 2.0), ("num_minibatches", 0), ("torso", "transformer"),
                         ("hidden_sizes", ())]:
        with pytest.raises(ConfigError, match=f"agent.{field}"):
            dataclasses.replace(PQNConfig(), **{field: value})
    with pytest.raises(ConfigError, match="agent.num_minibatches"):
        PQNConfig(num_minibatches=3).check_batch(BatchShape(16, 8))
    with pytest.raises(ConfigError, match="does not support"):
        make_agent(PQNConfig(), OBS_SPEC, BoxSpec((2,), -1.0, 1.0), num_updates=1, axis_name=None)


@pytest.mark.slow
def test_registered_and_greedy_act_is_the_argmax():
    assert algorithms()["pqn"] is algorithm_for(PQNConfig()) and algorithm_for(PQNConfig()).make is pqn.make_pqn
    agent = make_agent(PQNConfig(), OBS_SPEC, ACTION_SPEC, num_updates=1, axis_name=None)
    state = jax.jit(agent.init)(jax.random.key(0))
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(5, 4)), jnp.float32)
    q = pqn.make_q_network(PQNConfig(), OBS_SPEC, ACTION_SPEC).apply(state.params.online, obs)
    np.testing.assert_array_equal(agent.greedy_act(state.params, obs), jnp.argmax(q, axis=-1))
    # The Q-network normalises each hidden layer (the LayerNorm that replaces a target network).
    assert {"LayerNorm_0", "LayerNorm_1"} <= set(state.params.online["params"]["torso"])


@pytest.mark.slow
def test_minatar_torso_equals_a_convolution():
    """The MinAtar torso's patch matmul is a 3x3 VALID convolution with the same kernel."""
    from podracer.networks import MinAtarCNN

    net = MinAtarCNN(channels=5, hidden_sizes=(7,), layer_norm=False)
    x = jnp.asarray(np.random.default_rng(0).uniform(size=(2, 10, 10, 4)), jnp.float32)
    params = net.init(jax.random.key(0), x)
    p = params["params"]
    conv = jax.lax.conv_general_dilated(x, p["kernel"], (1, 1), "VALID",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC")) + p["bias"]
    hidden = jax.nn.relu(conv).reshape(2, -1) @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]
    np.testing.assert_allclose(net.apply(params, x), jax.nn.relu(hidden), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_targets_bootstrap_from_behaviour_q_where_episodes_go_on():
    """The agent's targets equal Q(lambda) over a full forward pass of `next_obs`, with and
    without truncations and terminations in the rollout."""
    config = PQNConfig(hidden_sizes=(8,))
    network = pqn.make_q_network(config, OBS_SPEC, ACTION_SPEC)
    agent = pqn.make_pqn(config, OBS_SPEC, ACTION_SPEC, num_updates=1)
    params = jax.jit(agent.init)(jax.random.key(0)).params
    traj = random_trajectory(agent, params, jax.random.key(1), T=6, B=5, obs_dim=4, num_actions=3)
    # Make next_obs[t] = obs[t + 1] where the episode went on, as a runner records it.
    cont = ~(traj.terminated | traj.truncated)[:-1, :, None]
    next_obs = traj.next_obs.at[:-1].set(jnp.where(cont, traj.obs[1:], traj.next_obs[:-1]))
    traj = traj._replace(next_obs=next_obs)
    assert bool(jnp.any(traj.truncated[:-1])) and bool(jnp.any(traj.terminated))
    # The reference, independent of `ops.q_lambda_targets`: Peng's Q(lambda) by a backward
    # loop, G_t = r_t + d_t ((1 - lambda) max_a Q(next_obs_t, a) + lambda G_{t+1}), cut where
    # the episode ended (G_t = r_t + d_t max_a Q) and at the end of the rollout.
    v_next = np.asarray(network.apply(params.online, next_obs)).max(-1)
    reward, end = np.asarray(traj.reward), np.asarray(traj.terminated | traj.truncated)
    discount = 0.99 * (1.0 - np.asarray(traj.terminated))
    expected = np.zeros_like(reward)
    for b in range(reward.shape[1]):
        g = 0.0
        for t in reversed(range(reward.shape[0])):
            lam = 0.0 if end[t, b] or t == reward.shape[0] - 1 else 0.95
            g = reward[t, b] + discount[t, b] * ((1.0 - lam) * v_next[t, b] + lam * g)
            expected[t, b] = g
    got = jax.jit(pqn.q_lambda_targets, static_argnums=(0, 3, 4))(network, params.online, traj, 0.99, 0.95)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def train_anakin(env_id, agent, steps, num_envs=16, rollout_length=8, devices=(0,), updates_per_call=50):
    config = Config(env=EnvConfig(env_id), agent=agent, total_env_steps=steps,
                    arch=AnakinConfig(num_envs=num_envs, rollout_length=rollout_length, devices=devices,
                                      updates_per_call=updates_per_call))
    return anakin.train(config)


PROBE = PQNConfig(learning_rate=3e-3, anneal_lr=False, optimizer="adam", num_epochs=2, num_minibatches=2,
                  gamma=0.9, q_lambda=0.65, epsilon_start=1.0, epsilon_end=0.2, epsilon_decay_steps=2_000,
                  hidden_sizes=(16,))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_learns_action_dependent_reward_and_discounting():
    """Probe environments: Q(+1, 1) = Q(-1, 0) = 1 and the wrong actions -1 (the greedy
    policy reads the observation); two-step discounting gives Q(first) = gamma."""
    network = pqn.make_q_network(PROBE, ObsSpec((1,), jnp.float32), DiscreteSpec(2))
    apply = jax.jit(network.apply)
    result = train_anakin("ProbeActionReward", PROBE, 10_240)
    q = np.asarray(apply(jax.tree.map(lambda x: x[0], result.state.agent.params.online), jnp.array([[1.0], [-1.0]])))
    np.testing.assert_allclose(q, [[-1.0, 1.0], [1.0, -1.0]], atol=0.15)
    result = train_anakin("ProbeDiscounting", PROBE, 10_240)
    q = np.asarray(apply(jax.tree.map(lambda x: x[0], result.state.agent.params.online), jnp.array([[0.0], [1.0]])))
    np.testing.assert_allclose(q, [[0.9, 0.9], [1.0, 1.0]], atol=0.1)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_pqn_learns_catch_on_four_devices():
    """Anakin on 4 devices: PQN catches most balls (return > 0.7) within 30k env steps while still
    exploring with epsilon 0.05 (a random policy scores about -0.6; ~0.8 by 15k steps)."""
    agent = PQNConfig(learning_rate=3e-3, anneal_lr=False, num_epochs=2, num_minibatches=4, q_lambda=0.65,
                      epsilon_end=0.05, epsilon_decay_steps=5_000, hidden_sizes=(64,))
    rows = train_anakin("Catch", agent, 30_720, num_envs=32, rollout_length=8, devices=(), updates_per_call=20).metrics
    returns = [r["episode_return"] for r in rows]
    assert np.mean(returns[-3:]) > 0.7, returns
    assert rows[-1]["epsilon"] == pytest.approx(0.05)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_pqn_runs_under_sebulba_with_replicated_learners():
    """The same agent under Sebulba (1 actor device, 2 learner devices, actors one version
    ahead): the epsilon schedule follows the learner's env steps and the learner replicas
    stay identical."""
    from sebulba import SebulbaConfig, train

    config = Config(env=EnvConfig("CartPole-v1"), total_env_steps=8 * 16 * 12,
                    agent=dataclasses.replace(PROBE, epsilon_decay_steps=8 * 16 * 12, num_minibatches=4),
                    arch=SebulbaConfig(num_envs=8, rollout_length=16, max_policy_lag=1, actor_devices=(0,),
                                       learner_devices=(1, 2), updates_per_log=4))
    result = train(config)
    rows = result.metrics
    assert [r["env_steps"] for r in rows] == [512, 1024, 1536]
    # Each row averages the epsilon after each of its 4 updates of 128 env steps (of 1536).
    expected = [1.0 - 0.8 * np.mean(np.arange(4 * row + 1, 4 * row + 5)) / 12 for row in range(3)]
    np.testing.assert_allclose([r["epsilon"] for r in rows], expected, rtol=1e-5)
    assert int(result.state.params.env_steps) == 1536
    for leaf in jax.tree.leaves(result.state.params):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        assert len(shards) == 2
        np.testing.assert_array_equal(shards[1], shards[0])
