"""DQN: config, registry, multi-device correctness, per-device replay, Anakin parity, learning."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import anakin
from anakin import AnakinConfig
from anakin.program import init_state, iteration_keys, make_train_call
from anakin.rollout import rollout
from experiments.presets_dqn import DQN_PRESETS
from podracer import parallel
from podracer.agents import DQNConfig, algorithm_for, algorithms, dqn, make_agent
from podracer.agents.sgd import check_step_metrics
from podracer.config import Config, ConfigError, EnvConfig
from podracer.counters import Count
from podracer.envs import make_jax_env
from podracer.replay import ReplaySample, Transition, make_replay
from podracer.types import BatchShape, DiscreteSpec, ObsSpec, Trajectory
from tests.support.helpers import tree_allclose

OBS_SPEC, ACTION_SPEC = ObsSpec((4,), jnp.float32), DiscreteSpec(3)


def test_config_errors_name_the_field():
    for field, value in [("learning_rate", 0.0), ("loss", "l1"), ("gamma", 1.5), ("n_step", 0),
                         ("target_update_tau", 0.0), ("epsilon_end", 2.0), ("batch_size", 10**6)]:
        with pytest.raises(ConfigError, match=f"agent.{field}"):
            dataclasses.replace(DQNConfig(), **{field: value})
    with pytest.raises(ConfigError, match="agent.buffer_size"):
        DQNConfig(buffer_size=256, batch_size=32).check_batch(BatchShape(16, 32))


@pytest.mark.slow
def test_registered():
    assert algorithms()["dqn"].config is DQNConfig and algorithm_for(DQNConfig()).name == "dqn"
    agent = make_agent(DQNConfig(), OBS_SPEC, ACTION_SPEC, num_updates=1, axis_name=None)
    assert set(agent._fields) == {"init", "act", "update", "greedy_act", "initial_core"}
    assert isinstance(DQN_PRESETS["dqn-cartpole-anakin"]().agent, DQNConfig)
    # The greedy policy (evaluation) is the argmax of the online Q-network.
    state = agent.init(jax.random.key(0))
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(5,) + OBS_SPEC.shape), jnp.float32)
    q = dqn.make_q_network(DQNConfig(), OBS_SPEC, ACTION_SPEC).apply(state.params.online, obs)
    np.testing.assert_array_equal(agent.greedy_act(state.params, obs), jnp.argmax(q, axis=-1))


def random_items(seed: int, M: int) -> ReplaySample:
    rng = np.random.default_rng(seed)
    items = Transition(
        obs=rng.normal(size=(M, 4)).astype(np.float32), action=rng.integers(0, 3, M).astype(np.int32),
        reward=rng.normal(size=M).astype(np.float32), discount=np.where(rng.uniform(size=M) < 0.2, 0.0, 0.9
                                                                         ).astype(np.float32),
        next_obs=rng.normal(size=(M, 4)).astype(np.float32),
    )
    return ReplaySample(items, np.zeros(M, np.int32), rng.uniform(0.2, 1.0, M).astype(np.float32))


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_gradient_step_on_four_devices_equals_global_batch_on_one(loss):
    """Four devices, each with a quarter of a global sample, take the same step (online,
    target, optimizer state) as one device with the whole sample."""
    config = DQNConfig(loss=loss, double_q=True, target_update_period=1, target_update_tau=0.5)
    network = dqn.make_q_network(config, OBS_SPEC, ACTION_SPEC)
    optimizer = dqn.make_optimizer(config)
    online = network.init(jax.random.key(0), jnp.zeros((1, 4)))
    target = network.init(jax.random.key(1), jnp.zeros((1, 4)))
    learner = dqn.DQNLearnerState(optimizer.init(online), target, Count.zeros(), jnp.zeros(()), Count.zeros())
    sample = random_items(0, 32)

    one = jax.jit(dqn.make_learn_on_batch(config, network, optimizer, None))
    expected = one(online, learner, sample)

    mesh = parallel.make_mesh(jax.devices()[:4], "d")
    learn = dqn.make_learn_on_batch(config, network, optimizer, "d")
    without_local_metrics = lambda *args: (lambda o, learner, m, td: (o, learner, td))(*learn(*args))  # noqa: E731
    four = jax.jit(jax.shard_map(without_local_metrics, mesh=mesh,
                                 in_specs=(P(), P(), P("d")), out_specs=(P(), P(), P("d"))))
    got = four(online, learner, parallel.shard(sample, mesh, P("d")))
    tree_allclose(got[0], expected[0], rtol=1e-5, atol=1e-6)
    tree_allclose(got[1], expected[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[2], expected[3], rtol=1e-5, atol=1e-6)  # per-item TD errors
    moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), expected[0], online)
    assert max(jax.tree.leaves(moved)) > 1e-5


def numbered_trajectory(T: int, B: int) -> Trajectory:
    """Observation `[t, b, 0, 0]` identifies each step; no episode ends."""
    t, b = np.meshgrid(np.arange(T), np.arange(B), indexing="ij")
    obs = np.stack([t, b, 0 * t, 0 * t], axis=-1).astype(np.float32)
    return Trajectory(obs, np.zeros((T, B), np.int32), np.ones((T, B), np.float32), np.zeros((T, B), bool),
                      np.zeros((T, B), bool), obs + 0.5, {})


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("prioritized", [False, True])
def test_update_on_four_devices_keeps_a_buffer_per_device(prioritized):
    """Each device's buffer holds exactly its shard of the environments; the replicated
    parameters stay identical on every device and move."""
    config = DQNConfig(buffer_size=64, batch_size=8, gradient_steps=2, learning_starts=0, prioritized=prioritized)
    agent = dqn.make_dqn(config, OBS_SPEC, ACTION_SPEC, num_updates=4, axis_name="d")
    state = jax.jit(agent.init)(jax.random.key(0))
    state = state.replace(local=jax.tree.map(lambda x: jnp.broadcast_to(x, (4,) + x.shape), state.local))
    T, B = 4, 8
    mesh = parallel.make_mesh(jax.devices()[:4], "d")
    specs = jax.tree.map(lambda _: P(), state.replace(local=None)).replace(
        local=jax.tree.map(lambda _: P("d"), state.local))

    def per_device(state, traj, key):
        state = state.replace(local=jax.tree.map(lambda x: x[0], state.local))
        new, metrics = agent.update(state, traj, key[0])
        params = jax.tree.map(lambda x: x[None], new.params)
        return new.replace(local=jax.tree.map(lambda x: x[None], new.local)), params, metrics

    run = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(specs, P(None, "d"), P("d")),
                                out_specs=(specs, P("d"), P())))
    keys = jax.random.split(jax.random.key(1), 4)
    new, replicas, metrics = run(state, parallel.shard(numbered_trajectory(T, B), mesh, P(None, "d")), keys)

    buffers = np.asarray(new.local.experience.obs)  # [D, 1, capacity, 4]
    for d in range(4):
        held = buffers[d, 0, : T * B // 4]
        assert set(held[:, 1].astype(int).tolist()) == {2 * d, 2 * d + 1}  # envs of device d only
        assert sorted(held[:, 0].astype(int).tolist()) == sorted(list(range(T)) * 2)
    for leaf in jax.tree.leaves(replicas):
        for d in range(1, 4):
            np.testing.assert_array_equal(leaf[d], leaf[0])
    assert int(new.params.env_steps) == T * B and float(metrics["learning"]) == 1.0
    moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), new.params.online, state.params.online)
    assert max(jax.tree.leaves(moved)) > 1e-5


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_anakin_program_equals_calling_update_directly():
    """One compiled Anakin iteration (rollout, buffer insert, learning) on one device gives the
    same agent state as the same rollout fed to `agent.update` by hand."""
    env = make_jax_env("Catch")
    env_params = env.default_params
    config = DQNConfig(buffer_size=128, batch_size=16, gradient_steps=3, learning_starts=0, n_step=2)
    spec = (env.observation_spec(env_params), env.action_spec(env_params))
    in_program = dqn.make_dqn(config, *spec, num_updates=1, axis_name=anakin.program.AXIS)
    direct = dqn.make_dqn(config, *spec, num_updates=1, axis_name=None)
    mesh = parallel.make_mesh(jax.devices()[:1], anakin.program.AXIS)
    state = init_state(env, env_params, in_program, mesh, jax.random.key(0), num_seeds=1, num_envs=4)
    before = jax.device_get(state)

    after, _ = make_train_call(env, env_params, in_program, mesh, rollout_length=8)(state, jnp.int32(1))

    agent_state = jax.tree.map(lambda x: x[0], before.agent)
    agent_state = agent_state.replace(local=jax.tree.map(lambda x: x[0], agent_state.local))
    envs = jax.tree.map(lambda x: x[0], before.envs)
    _, rollout_key, update_key = iteration_keys(before.key[0, 0])
    # One compiled program, not one per operation (each costs a compile on CPU).
    traj = jax.jit(lambda params, envs, key: rollout(env, env_params, direct, params, envs, key, 8)[1])(
        agent_state.params, envs, rollout_key)
    expected, _ = jax.jit(direct.update)(agent_state, traj, update_key)

    got = jax.tree.map(lambda x: x[0], jax.device_get(after.agent))
    got = got.replace(local=jax.tree.map(lambda x: x[0], got.local))
    tree_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert int(got.opt_state.gradient_steps) == 3


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_dqn_learns_catch_on_four_devices():
    """Anakin on 4 devices, a buffer each: DQN learns Catch within 40k steps, one of the last
    3 rows above 0.3 (a random policy scores about -0.6; seeds 0-4 measured 0.39-0.96, so a
    bar of 0.8 failed two seeds in five)."""
    config = Config(
        env=EnvConfig("Catch"), total_env_steps=40_960, seed=0,
        agent=DQNConfig(learning_rate=1e-3, buffer_size=5_000, batch_size=32, gradient_steps=2,
                        learning_starts=2_000, target_update_period=50, epsilon_decay_steps=15_000,
                        epsilon_end=0.02, hidden_sizes=(64,)),
        arch=AnakinConfig(num_envs=32, rollout_length=4, updates_per_call=40),
    )
    rows = anakin.train(config).metrics
    returns = [r["episode_return"] for r in rows]
    assert max(returns[-3:]) > 0.3, returns


def run_credit_updates(unroll_sgd: bool):
    """17 updates of 4 x 5 transitions at ratio 0.3, batches of 16: `(state, steps taken
    after each, achieved ratio logged by each)`."""
    config = DQNConfig(buffer_size=256, batch_size=16, replay_ratio=0.3, learning_starts=40, hidden_sizes=(8,),
                       unroll_sgd=unroll_sgd)
    agent = dqn.make_dqn(config, OBS_SPEC, ACTION_SPEC, num_updates=17, axis_name=None)
    update = jax.jit(agent.update)
    state = jax.jit(agent.init)(jax.random.key(0))
    traj = numbered_trajectory(4, 5)
    taken, achieved = [], []
    for k in range(17):
        state, metrics = update(state, traj, jax.random.key(k))
        taken.append(int(state.opt_state.gradient_steps))
        achieved.append(float(metrics["replay_ratio_achieved"]))
        assert float(metrics["replay_ratio"]) == pytest.approx(0.3)
    return state, taken, achieved


@pytest.mark.costly
@pytest.mark.timeout(60)
def test_replay_ratio_credit_carries_fractions_and_is_logged():
    """Ratio 0.3 on 20 transitions per update with batches of 16 earns 0.375 steps per
    update once learning starts (at 40 env steps, the second update): whole steps are taken
    as the credit crosses each integer, and the achieved ratio comes from the counters.
    Unrolled steps (`unroll_sgd`) give the same result as the loop."""
    assert DQNConfig(batch_size=16, replay_ratio=0.3).steps_per_update(20) == 0.375
    assert DQNConfig(batch_size=16, replay_ratio=0.3).max_steps_per_update(20) == 1
    state, taken, achieved = run_credit_updates(unroll_sgd=False)
    assert taken == [int(0.375 * k) for k in range(17)]  # 0 before learning, then floor(0.375 k)
    assert float(state.opt_state.replay_credit) == pytest.approx(0.0)  # 16 x 0.375 = 6 steps exactly
    assert int(state.opt_state.learning_env_steps) == 16 * 20
    assert achieved[0] == 0.0 and achieved[-1] == pytest.approx(0.3)
    assert abs(achieved[-1] - 0.3) / 0.3 < 0.1
    unrolled, unrolled_taken, _ = run_credit_updates(unroll_sgd=True)
    assert unrolled_taken == taken
    tree_allclose(unrolled, state, rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigError, match="agent.replay_ratio"):
        DQNConfig(replay_ratio=0.0)


@pytest.mark.costly
@pytest.mark.timeout(120)
def test_importance_exponent_reaches_one_at_the_last_update():
    """Prioritized replay's beta anneals over the updates that learn, not from the run's
    start: 6 updates of 8 env steps with learning from 20 steps (the 3rd update on) take
    beta from 0.4 to 1 in 4 equal steps."""
    config = DQNConfig(buffer_size=64, batch_size=8, prioritized=True, importance_exponent=0.4, learning_starts=20,
                       hidden_sizes=(8,))
    agent = dqn.make_dqn(config, OBS_SPEC, ACTION_SPEC, num_updates=6, axis_name=None)
    update = jax.jit(agent.update)
    state = jax.jit(agent.init)(jax.random.key(0))
    betas, learning = [], []
    for k in range(6):
        state, metrics = update(state, numbered_trajectory(4, 2), jax.random.key(k))
        betas.append(float(metrics["importance_exponent"]))
        learning.append(float(metrics["learning"]))
    assert learning == [0, 0, 1, 1, 1, 1]
    np.testing.assert_allclose(betas[2:], [0.55, 0.7, 0.85, 1.0], rtol=1e-6)


def test_per_step_metrics_must_be_declared_as_step_metrics(monkeypatch):
    """Every metric DQN averages over an update's gradient steps is in its `step_metrics`
    (metrics rows average those over gradient steps): an undeclared one is refused when the
    update traces, naming both lists."""

    assert set(algorithm_for(DQNConfig()).step_metrics) == set(dqn.STEP_METRICS)
    with pytest.raises(TypeError, match=r"dqn: the per-step metrics \['extra', 'loss'\] differ"):
        check_step_metrics({"loss": 0, "extra": 0}, ("loss",), "dqn")
    monkeypatch.setattr(dqn, "STEP_METRICS", dqn.STEP_METRICS[1:])  # as if "loss" were new and undeclared
    config = DQNConfig(buffer_size=64, batch_size=8, gradient_steps=1, learning_starts=0, hidden_sizes=(8,))
    agent = dqn.make_dqn(config, OBS_SPEC, ACTION_SPEC, num_updates=2, axis_name=None)
    with pytest.raises(TypeError, match="list every per-step metric"):
        jax.eval_shape(agent.update, jax.eval_shape(agent.init, jax.random.key(0)), numbered_trajectory(4, 5),
                       jax.random.key(1))


@pytest.mark.parametrize("learning_starts, n_step, T, B, devices", [
    (0, 1, 4, 2, 1), (100, 1, 4, 2, 1), (100, 1, 4, 2, 4), (0, 6, 2, 3, 1), (10, 6, 2, 3, 2), (64, 3, 8, 8, 1),
])
def test_learning_starts_at_the_first_update_with_enough_steps(learning_starts, n_step, T, B, devices):
    """`learning_updates` against a count by hand: the first update that learns is the first
    whose env steps (all devices) reach `learning_starts` and whose `T * B` steps per device
    leave one past the newest `n - 1` of each environment held back."""
    config = DQNConfig(learning_starts=learning_starts, n_step=n_step)
    first = next(k for k in range(1, 1000)
                 if k * T * B * devices >= learning_starts and k * T * B > (n_step - 1) * B)
    assert dqn.learning_updates(config, 50, T, B, devices) == 50 - first + 1


def test_the_registered_probe_config():
    assert dqn.ALGORITHM.probe_config() == DQNConfig(
        learning_rate=1e-3, buffer_size=4_096, batch_size=64, gradient_steps=2, learning_starts=512,
        target_update_period=50, epsilon_start=1.0, epsilon_end=0.05, epsilon_decay_steps=4_000, hidden_sizes=(32,),
        gamma=0.9)


@pytest.mark.costly
@pytest.mark.parametrize("n_step", [1, 2])
def test_sampling_holds_back_only_the_newest_n_minus_1_steps_of_each_environment(n_step):
    """4 steps of 2 environments in a buffer of 8: n-step transitions are drawn from every
    step but the newest `n - 1` of each environment (whose successors are still to come);
    40 uniform samples of 8 miss a sampleable slot with probability below 1e-17."""
    L, B = 4, 2
    config = DQNConfig(n_step=n_step, buffer_size=L * B, batch_size=L * B, hidden_sizes=(4,))
    replay = make_replay(config.buffer_size, config.batch_size)
    local = replay.init(dqn._example_step(ObsSpec((2,), jnp.float32)))
    false = jnp.zeros(L * B, bool)
    obs = jnp.zeros((L * B, 2))
    local = replay.add(local, dqn.Step(obs, jnp.zeros(L * B, jnp.int32), jnp.arange(L * B, dtype=jnp.float32),
                                       false, false, obs, false))
    keys = jax.random.split(jax.random.key(0), 40)
    drawn = jax.vmap(lambda key: dqn.sample_transitions(replay, local, key, 0.4, B, config).indices)(keys)
    assert set(np.asarray(drawn).ravel().tolist()) == set(range((L - (n_step - 1)) * B))
