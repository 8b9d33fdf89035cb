"""PQN: config, registry, multi-device correctness, targets in the agent, learning on probes
and Catch (Anakin), and a run under Sebulba."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import anakin
from anakin import AnakinConfig
from podracer.agents import PQNConfig, algorithm_for, algorithms, make_agent, pqn
from podracer.config import Config, ConfigError, EnvConfig
from podracer.types import BatchShape, BoxSpec, DiscreteSpec, ObsSpec, Trajectory
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


PQN_BAD = [
    (dict(learning_rate=0.0), "agent.learning_rate must be > 0, got 0.0"),
    (dict(adam_eps=0.0), "agent.adam_eps must be > 0, got 0.0"),
    (dict(max_grad_norm=0.0), "agent.max_grad_norm must be > 0, got 0.0"),
    (dict(num_epochs=0), "agent.num_epochs must be > 0, got 0"),
    (dict(num_minibatches=0), "agent.num_minibatches must be > 0, got 0"),
    (dict(epsilon_decay_steps=0), "agent.epsilon_decay_steps must be > 0, got 0"),
    (dict(reward_scale=0.0), "agent.reward_scale must be > 0, got 0.0"),
    (dict(optimizer="sgd"), "agent.optimizer must be 'radam' or 'adam', got 'sgd'"),
    (dict(gamma=1.5), "agent.gamma must be in [0, 1], got 1.5"),
    (dict(q_lambda=-0.1), "agent.q_lambda must be in [0, 1], got -0.1"),
    (dict(epsilon_start=1.1), "agent.epsilon_start must be in [0, 1], got 1.1"),
    (dict(epsilon_end=-0.5), "agent.epsilon_end must be in [0, 1], got -0.5"),
    (dict(torso="transformer"),
     "agent.torso must be one of ('mlp', 'nature_cnn', 'impala_cnn', 'minatar_cnn', 'multi_encoder'), got 'transformer'"),
    (dict(activation="swish"), "agent.activation must be one of ('tanh', 'relu', 'gelu'), got 'swish'"),
    (dict(hidden_sizes=()), "agent.hidden_sizes must be positive sizes, got ()"),
    (dict(hidden_sizes=(4, 0)), "agent.hidden_sizes must be positive sizes, got (4, 0)"),
]


@pytest.mark.parametrize("fields, message", PQN_BAD, ids=[m.split()[0] for _, m in PQN_BAD])
def test_each_bad_pqn_hyperparameter_is_named_with_its_rule_and_value(fields, message):
    with pytest.raises(ConfigError) as error:
        PQNConfig(**fields)
    assert str(error.value) == message


def test_pqn_hyperparameters_on_the_edge_of_their_range_are_accepted():
    for fields in (dict(gamma=0.0, q_lambda=0.0, epsilon_start=0.0, epsilon_end=0.0, optimizer="adam"),
                   dict(gamma=1.0, q_lambda=1.0, epsilon_start=1.0, epsilon_end=1.0, num_epochs=1, hidden_sizes=(1,))):
        config = PQNConfig(**fields)
        assert {name: getattr(config, name) for name in fields} == fields
    PQNConfig(num_minibatches=4).check_batch(BatchShape(4, 2))
    with pytest.raises(ConfigError) as error:
        PQNConfig(num_minibatches=3).check_batch(BatchShape(4, 2))
    assert str(error.value) == "agent.num_minibatches must divide the per-device batch of 8 transitions, got 3"


def test_epsilon_decays_linearly_over_the_decay_steps_then_holds():
    schedule = pqn.epsilon_schedule(PQNConfig(epsilon_start=0.9, epsilon_end=0.1, epsilon_decay_steps=100))
    for steps, expected in ((0, 0.9), (25, 0.7), (100, 0.1), (1000, 0.1)):
        np.testing.assert_allclose(schedule(steps), expected, rtol=1e-6)


@pytest.mark.parametrize("optimizer", ["radam", "adam"])
def test_the_optimizer_clips_the_global_norm_then_steps_with_the_configured_rule(optimizer):
    """Two steps (RAdam's first steps differ from Adam's) of a gradient whose norm, 5, is
    clipped to 2, with the configured epsilon, the learning rate decayed over 4 steps."""
    config = PQNConfig(optimizer=optimizer, learning_rate=0.1, max_grad_norm=2.0, adam_eps=1e-3, anneal_lr=True)
    rule = optax.radam if optimizer == "radam" else optax.adam
    reference = rule(lambda count: 0.1 * (4 - count) / 4, eps=1e-3)
    tx = pqn.make_optimizer(config, 4)
    params, grads = jnp.zeros(2), jnp.array([3.0, 4.0])

    @jax.jit
    def two_steps(params, grads):
        state, expected_state, out = tx.init(params), reference.init(params), []
        for _ in range(2):
            update, state = tx.update(grads, state, params)
            expected, expected_state = reference.update(grads * 0.4, expected_state, params)
            out.append((update, expected))
        return out

    for update, expected in two_steps(params, grads):
        np.testing.assert_allclose(update, expected, rtol=1e-5)


def test_successor_values_call_the_network_only_on_the_last_and_truncated_steps():
    """`[T, B, A]` values: `next_obs[t]`'s are `value[t + 1]` where the episode went on (here
    deliberately different from the network's, to tell them apart), the network's on the
    last step and on truncated steps; a terminated step's are left as `value[t + 1]`."""
    T, B, A = 4, 3, 2
    rng = np.random.default_rng(0)
    value = rng.normal(size=(T, B, A)).astype(np.float32)
    next_obs = rng.normal(size=(T, B, A)).astype(np.float32)
    truncated, terminated = np.zeros((T, B), bool), np.zeros((T, B), bool)
    truncated[1, 0] = truncated[0, 2] = terminated[2, 1] = True
    traj = Trajectory(np.zeros((T, B, A), np.float32), np.zeros((T, B), np.int32), np.zeros((T, B), np.float32),
                      terminated, truncated, next_obs, {})

    def network(obs):
        return 10.0 * obs

    got = jax.jit(lambda traj, value: pqn.successor_values(network, traj, value))(traj, value)
    expected = np.concatenate([value[1:], 10.0 * next_obs[-1:]])
    expected[truncated] = 10.0 * next_obs[truncated]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    last_only = traj._replace(truncated=np.concatenate([np.zeros((T - 1, B), bool), np.ones((1, B), bool)]))
    got = jax.jit(lambda traj, value: pqn.successor_values(network, traj, value))(last_only, value)
    np.testing.assert_allclose(got, np.concatenate([value[1:], 10.0 * next_obs[-1:]]), rtol=1e-6)


class ReadOffQ(nn.Module):
    """Q-values read off the observations: `obs [N, A] -> obs`, no parameters."""

    @nn.compact
    def __call__(self, obs):
        return obs


def test_q_lambda_targets_of_a_rollout_by_a_backward_loop():
    """Peng's Q(lambda) with scaled rewards, bootstrapping from the behaviour's Q-values where
    the episode went on and the network's on the last and truncated steps, not at all after a
    termination, and cut at every end: against a NumPy backward loop."""
    T, B, A, gamma, lam, scale = 5, 3, 2, 0.9, 0.7, 0.5
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(T, B, A)).astype(np.float32)
    next_obs = rng.normal(size=(T, B, A)).astype(np.float32)
    terminated, truncated = np.zeros((T, B), bool), np.zeros((T, B), bool)
    terminated[1, 0] = truncated[2, 1] = True
    cont = ~(terminated | truncated)[:-1, :, None]
    next_obs[:-1] = np.where(cont, obs[1:], next_obs[:-1])  # as a runner records them
    reward = rng.normal(size=(T, B)).astype(np.float32)
    traj = Trajectory(obs, np.zeros((T, B), np.int32), reward, terminated, truncated, next_obs, {"q": obs})
    got = jax.jit(pqn.q_lambda_targets, static_argnums=(0, 3, 4, 5))(ReadOffQ(), {}, traj, gamma, lam, scale)
    v_next, end = next_obs.max(-1), terminated | truncated
    discount = gamma * (1.0 - terminated)
    expected = np.zeros((T, B))
    for b in range(B):
        g = 0.0
        for t in reversed(range(T)):
            trace = 0.0 if end[t, b] or t == T - 1 else lam
            g = scale * reward[t, b] + discount[t, b] * ((1.0 - trace) * v_next[t, b] + trace * g)
            expected[t, b] = g
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_pqn_loss_is_half_the_mean_squared_td_error_with_its_metrics():
    q = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.0]], np.float32)
    action, target = np.array([1, 0, 1], np.int32), np.array([1.0, 4.0, -2.0], np.float32)
    loss, metrics = jax.jit(lambda batch: pqn.pqn_loss(2.0, lambda params, obs: params * obs, batch))(
        (q, action, target)
    )
    td = target - 2.0 * q[np.arange(3), action]  # [-3, -2, -2]
    np.testing.assert_allclose(loss, 0.5 * np.mean(td**2), rtol=1e-6)
    assert sorted(metrics) == ["loss", "q_mean", "td_abs"]
    np.testing.assert_allclose(metrics["loss"], loss)
    np.testing.assert_allclose(metrics["q_mean"], np.mean(2.0 * q), rtol=1e-6)
    np.testing.assert_allclose(metrics["td_abs"], np.mean(np.abs(td)), rtol=1e-6)


@pytest.mark.slow
def test_an_update_counts_its_env_steps_and_logs_epsilon_and_the_targets_mean():
    """One update from a fresh state on a `[T, B]` rollout: the schedule position advances by
    `T * B`, `epsilon` is the schedule's there, `target_mean` the mean Q(lambda) target of the
    parameters the update started from; acting records the Q-values, and `greedy_act` is
    their argmax. Slow: an update compiled (about 10 s on the loaded 2-core machine)."""
    T, B = 4, 4
    config = PQNConfig(hidden_sizes=(8,), num_epochs=1, num_minibatches=2, epsilon_start=1.0, epsilon_end=0.0,
                       epsilon_decay_steps=64)
    network = pqn.make_q_network(config, OBS_SPEC, ACTION_SPEC)
    agent = pqn.make_pqn(config, OBS_SPEC, ACTION_SPEC, num_updates=2)
    state = jax.jit(agent.init)(jax.random.key(0))
    traj = random_trajectory(agent, state.params, jax.random.key(1), T=T, B=B, obs_dim=4, num_actions=3)
    q = jax.jit(network.apply)(state.params.online, traj.obs)
    np.testing.assert_allclose(traj.extras["q"], q, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(jax.jit(agent.greedy_act)(state.params, traj.obs[0]), np.argmax(q[0], -1))
    new, metrics = jax.jit(agent.update)(state, traj, jax.random.key(2))
    assert int(new.params.env_steps) == T * B and int(new.update_count) == 1
    targets = jax.jit(pqn.q_lambda_targets, static_argnums=(0, 3, 4))(
        network, state.params.online, traj, config.gamma, config.q_lambda
    )
    np.testing.assert_allclose(metrics["target_mean"], np.mean(targets), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics["epsilon"], 1.0 - T * B / 64, rtol=1e-6)
    assert sorted(metrics) == ["epsilon", "grad_norm", "loss", "q_mean", "target_mean", "td_abs"]


def test_the_agent_traces_an_update_with_every_metric_and_a_layer_norm_network():
    """`init` and `update` traced (`jax.eval_shape`: nothing compiled, the compiled update is
    the slow test above): the state's env-step count, every metric a scalar, and the
    Q-network's LayerNorm as configured; `unroll_sgd` unrolls the minibatch loop (2 steps)."""
    config = PQNConfig(hidden_sizes=(8,), num_epochs=1, num_minibatches=2, reward_scale=0.5)
    agent = pqn.make_pqn(config, OBS_SPEC, ACTION_SPEC, num_updates=2)
    state = jax.eval_shape(agent.init, jax.random.key(0))
    T, B = 4, 2
    traj = Trajectory(jnp.zeros((T, B, 4)), jnp.zeros((T, B), jnp.int32), jnp.zeros((T, B)), jnp.zeros((T, B), bool),
                      jnp.zeros((T, B), bool), jnp.zeros((T, B, 4)), {"q": jnp.zeros((T, B, 3))})
    new, metrics = jax.eval_shape(agent.update, state, traj, jax.random.key(1))
    assert jax.tree.structure(new) == jax.tree.structure(state)
    assert sorted(metrics) == ["epsilon", "grad_norm", "loss", "q_mean", "target_mean", "td_abs"]
    assert all(m.shape == () for m in metrics.values())
    unrolled = pqn.make_pqn(dataclasses.replace(config, unroll_sgd=True), OBS_SPEC, ACTION_SPEC, num_updates=2)
    jaxpr = jax.make_jaxpr(unrolled.update)(state, traj, jax.random.key(1))
    assert "unroll=2" in str(jaxpr) and "unroll=2" not in str(jax.make_jaxpr(agent.update)(state, traj, jax.random.key(1)))
    for layer_norm in (True, False):
        network = pqn.make_q_network(dataclasses.replace(config, layer_norm=layer_norm), OBS_SPEC, ACTION_SPEC)
        assert network.torso.layer_norm is layer_norm and network.num_actions == 3


def test_the_probe_config_is_the_one_its_probes_train():
    assert pqn._probe_config() == PQNConfig(learning_rate=3e-3, anneal_lr=False, optimizer="adam", num_minibatches=2,
                                            num_epochs=2, epsilon_decay_steps=4_000, hidden_sizes=(32,), gamma=0.9)
