"""Legal-action masks: the masked ops against references (distrax and rlax on the legal actions),
masks through replay, JAX environments on the host, and action specs from every adapter."""

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from podracer import ops
from podracer.agents.dqn import DQNConfig, _example_step, to_steps, transitions_at
from podracer.config import EnvConfig
from podracer.counters import Count
from podracer.envs import make_jax_env
from podracer.envs.host import host_env_specs, make_host_env
from podracer.replay import make_replay
from podracer.types import BoxSpec, DiscreteSpec, MaskedObs, ObsSpec, Trajectory, zeros_like_spec

A = 5


def random_masks(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """Random legal-action masks with at least one legal action per row."""
    rng = np.random.default_rng(seed)
    legal = rng.uniform(size=shape + (A,)) < 0.5
    legal[..., 0] |= ~legal.any(axis=-1)
    return legal


def test_masked_log_probs_and_entropy_are_those_of_the_legal_actions():
    """Log-probabilities and entropy of masked logits equal those of the softmax over the
    legal logits alone (distrax's entropy as the oracle); the gradients are finite and do not
    reach illegal logits."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, A)).astype(np.float32) * 3
    legal = random_masks(1, (6,))

    def objective(logits):
        masked = ops.masked_logits(logits, legal)
        actions = jnp.argmax(jnp.where(legal, logits, -jnp.inf), axis=-1)
        return ops.categorical_log_prob(masked, actions).sum() + ops.entropy_loss(masked), masked

    (_, masked), grads = jax.jit(jax.value_and_grad(objective, has_aux=True))(logits)
    for row in range(6):
        sub = logits[row][legal[row]]
        expected_log_probs = sub - np.log(np.exp(sub - sub.max()).sum()) - sub.max()
        got = np.asarray(jax.nn.log_softmax(masked[row]))
        np.testing.assert_allclose(got[legal[row]], expected_log_probs, rtol=1e-5, atol=1e-6)
        assert np.all(np.isneginf(got[~legal[row]]))
        entropy = -float(ops.entropy_loss(masked[row]))
        np.testing.assert_allclose(entropy, float(distrax.Softmax(jnp.asarray(sub)).entropy()), rtol=1e-5)
    assert np.all(np.isfinite(grads)) and np.all(np.asarray(grads)[~legal] == 0.0)


def test_a_row_without_legal_actions_is_left_unmasked():
    logits = jnp.array([[1.0, 2.0, 3.0]])
    masked = ops.masked_logits(logits, jnp.zeros((1, 3), bool))
    np.testing.assert_array_equal(masked, logits)
    assert np.isfinite(ops.entropy_loss(masked))


@pytest.mark.slow
def test_epsilon_greedy_picks_only_legal_actions_uniformly():
    """Exploring, the action is uniform over the legal ones; greedy, the best legal one
    even where the best of all is illegal."""
    q = jnp.array(np.random.default_rng(2).normal(size=(4, A)), jnp.float32)
    legal = random_masks(3, (4,))
    q = q.at[:, 0].set(jnp.where(legal[:, 0], q[:, 0], 10.0))  # the unmasked best is illegal where it can be
    draw = jax.jit(jax.vmap(ops.epsilon_greedy, in_axes=(0, None, None, None)))
    explore = np.asarray(draw(jax.random.split(jax.random.key(0), 4000), q, 1.0, legal))  # [N, 4]
    for row in range(4):
        counts = np.bincount(explore[:, row], minlength=A)
        assert np.all(counts[~legal[row]] == 0)
        expected = 4000 / legal[row].sum()
        assert np.all(np.abs(counts[legal[row]] - expected) < 5 * np.sqrt(expected)), counts
    greedy = np.asarray(draw(jax.random.split(jax.random.key(1), 3), q, 0.0, legal))
    best = np.argmax(np.where(legal, np.asarray(q), -np.inf), axis=-1)
    np.testing.assert_array_equal(greedy, np.broadcast_to(best, greedy.shape))
    assert np.asarray(ops.epsilon_greedy(jax.random.key(0), q, 0.0)).dtype == np.int32


def test_masked_q_targets_match_rlax_on_legal_values():
    """Q-learning and Double DQN targets with masks equal rlax's with the illegal values of
    the bootstrap state pushed far below (the max and argmax over legal actions)."""
    rng = np.random.default_rng(4)
    B = 7
    q_tm1, q_t, q_sel = (jnp.asarray(rng.normal(size=(B, A)), jnp.float32) for _ in range(3))
    a_tm1 = jnp.asarray(rng.integers(0, A, B), jnp.int32)
    r_t, discount_t = jnp.asarray(rng.normal(size=B), jnp.float32), jnp.full((B,), 0.9, jnp.float32)
    legal = random_masks(5, (B,))
    q_t, q_sel = q_t + 5 * jnp.asarray(~legal), q_sel + 5 * jnp.asarray(~legal)  # illegal actions look best
    low = lambda q: jnp.where(legal, q, -1e9)  # noqa: E731
    q_target = ops.q_learning_target(r_t, discount_t, q_t, legal)
    expected = jax.vmap(rlax.q_learning)(q_tm1, a_tm1, r_t, discount_t, low(q_t))
    np.testing.assert_allclose(ops.td_error(q_tm1, a_tm1, q_target), expected, rtol=1e-5, atol=1e-5)
    double = ops.double_q_learning_target(r_t, discount_t, q_t, q_sel, legal)
    expected = jax.vmap(rlax.double_q_learning)(q_tm1, a_tm1, r_t, discount_t, q_t, low(q_sel))
    np.testing.assert_allclose(ops.td_error(q_tm1, a_tm1, double), expected, rtol=1e-5, atol=1e-5)
    # Without masks, the same functions are rlax's plain targets.
    plain = ops.double_q_learning_target(r_t, discount_t, q_t, q_sel)
    np.testing.assert_allclose(ops.td_error(q_tm1, a_tm1, plain),
                               jax.vmap(rlax.double_q_learning)(q_tm1, a_tm1, r_t, discount_t, q_t, q_sel), rtol=1e-5)


def test_replay_transitions_keep_the_bootstrap_states_mask():
    """DQN's n-step transitions carry `MaskedObs` whole: the bootstrap observation's mask is
    the one of the state it bootstraps from."""
    T, B = 4, 2
    ids = np.arange(T * B, dtype=np.float32).reshape(T, B, 1)
    mask = np.stack([ids[..., 0] % A == a for a in range(A)], axis=-1)
    traj = Trajectory(MaskedObs(ids, mask), np.zeros((T, B), np.int32), np.ones((T, B), np.float32),
                      np.zeros((T, B), bool), np.zeros((T, B), bool), MaskedObs(ids + 100, mask[::-1]), {})
    config = DQNConfig(buffer_size=T * B, batch_size=4, n_step=2, gamma=0.9, learning_starts=0)
    replay = make_replay(config.buffer_size, config.batch_size, False, 0.6)

    @jax.jit
    def store_and_read(traj):
        spec = MaskedObs(ObsSpec((1,), np.dtype(np.float32)), ObsSpec((A,), np.dtype(bool)))
        local = replay.add(replay.init(_example_step(spec)), to_steps(traj, jnp.zeros((B,), bool)))
        return transitions_at(replay, local, jnp.arange(T * B), B, config)

    items = store_and_read(traj)
    assert isinstance(items.next_obs, MaskedObs) and isinstance(items.obs, MaskedObs)
    last = np.minimum(np.arange(T) + 1, T - 1)  # 2-step: bootstraps from next_obs[min(t + 1, T - 1)]
    expected_ids = (ids[last] + 100).reshape(-1, 1)
    np.testing.assert_array_equal(items.next_obs.obs, expected_ids)
    np.testing.assert_array_equal(items.next_obs.action_mask, mask[::-1][last].reshape(-1, A))
    np.testing.assert_array_equal(items.obs.action_mask, mask.reshape(-1, A))


def test_zeros_like_spec_follows_the_spec_tree():
    spec = MaskedObs(ObsSpec((2, 3), np.float32), ObsSpec((A,), np.dtype(bool)))
    zeros = zeros_like_spec(spec, (4,))
    assert isinstance(zeros, MaskedObs) and zeros.obs.shape == (4, 2, 3) and zeros.action_mask.dtype == bool


def test_jax_env_on_the_host_keeps_masks_and_auto_resets():
    """The "jax" host backend: a JAX environment stepped on the host, observations as NumPy
    pytrees (masks included), every step a real transition with the JAX env's semantics."""
    config = EnvConfig("ProbeMaskedAction")
    obs_spec, action_spec = host_env_specs(config)
    assert isinstance(obs_spec, MaskedObs) and action_spec == DiscreteSpec(4)
    env = make_host_env(config, num_envs=3, seed=0)
    try:
        obs = env.reset()
        assert isinstance(obs, MaskedObs) and isinstance(obs.obs, np.ndarray) and obs.action_mask.shape == (3, 4)
        env.send(np.zeros(3, np.int32))  # action 0 is never legal: +2, the episode goes on
        step = env.recv()
        np.testing.assert_array_equal(step.timestep.reward, [2.0, 2.0, 2.0])
        assert not step.episode_end.any()
        legal_best = np.where(step.timestep.obs.obs[:, 0] > 0, 3, 1)
        env.send(legal_best)
        step = env.recv()
        np.testing.assert_array_equal(step.timestep.reward, [1.0, 1.0, 1.0])
        assert step.episode_end.all() and step.timestep.terminated.all()
        np.testing.assert_array_equal(step.timestep.episode_length, [2, 2, 2])
        np.testing.assert_array_equal(step.timestep.episode_return, [3.0, 3.0, 3.0])
    finally:
        env.close()


@pytest.mark.parametrize("backend, env_id", [("jax", "Pendulum-v1"), ("gymnasium", "Pendulum-v1"),
                                             ("envpool", "HalfCheetah-v4"), ("jax", "ProbeContinuousAction")])
def test_continuous_action_spaces_report_a_box(backend, env_id):
    if backend == "jax":
        env = make_jax_env(env_id)
        spec = env.action_spec(env.default_params)
    else:
        spec = host_env_specs(EnvConfig(env_id, backend=backend))[1]
    assert isinstance(spec, BoxSpec)
    assert spec.shape == {"Pendulum-v1": (1,), "HalfCheetah-v4": (6,), "ProbeContinuousAction": (1,)}[env_id]
    high = {"Pendulum-v1": 2.0, "HalfCheetah-v4": 1.0, "ProbeContinuousAction": 1.0}[env_id]
    np.testing.assert_array_equal(spec.low, -high * np.ones(spec.shape, np.float32))
    np.testing.assert_array_equal(spec.high, high * np.ones(spec.shape, np.float32))


@pytest.mark.parametrize("argv, names", [
    (["train", "dqn-cartpole-anakin", "--env.id", "Pendulum-v1"], ("dqn", "Pendulum-v1", "continuous")),
    (["train", "impala-cartpole-anakin", "--env.id", "MountainCarContinuous-v0"], ("impala", "MountainCarContinuous")),
    (["train", "dqn-cartpole-sebulba", "--env.id", "HalfCheetah-v4"], ("dqn", "HalfCheetah-v4", "continuous")),
])
def test_an_agent_on_an_action_space_it_does_not_support_exits_2(argv, names, capsys, tmp_path):
    from experiments.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv + ["--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert all(name in err for name in names), err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("double_q", [True, False])
def test_dqn_loss_bootstraps_from_the_best_legal_action(double_q):
    """DQN's gradient step takes the bootstrap state's mask from replay: its TD errors are
    those of targets maximised over the legal actions only."""
    from podracer.agents import DQNConfig, dqn
    from podracer.replay import ReplaySample, Transition

    config = DQNConfig(double_q=double_q, hidden_sizes=(16,))
    obs_spec = MaskedObs(ObsSpec((3,), np.dtype(np.float32)), ObsSpec((A,), np.dtype(bool)))
    network = dqn.make_q_network(config, obs_spec, DiscreteSpec(A))
    optimizer = dqn.make_optimizer(config)
    online = network.init(jax.random.key(0), jnp.zeros((1, 3)))
    target = network.init(jax.random.key(1), jnp.zeros((1, 3)))
    learner = dqn.DQNLearnerState(optimizer.init(online), target, Count.zeros(), jnp.zeros(()), Count.zeros())
    rng = np.random.default_rng(6)
    M = 16
    obs, next_obs = (rng.normal(size=(M, 3)).astype(np.float32) for _ in range(2))
    legal = random_masks(7, (M,))
    q_next_online, q_next_target = network.apply(online, next_obs), network.apply(target, next_obs)
    assert np.any(np.argmax(q_next_online, -1) != np.argmax(np.where(legal, q_next_online, -np.inf), -1))
    items = Transition(MaskedObs(obs, random_masks(8, (M,))), rng.integers(0, A, M).astype(np.int32),
                       rng.normal(size=M).astype(np.float32), np.full(M, 0.9, np.float32), MaskedObs(next_obs, legal))
    *_, td = jax.jit(dqn.make_learn_on_batch(config, network, optimizer, None))(
        online, learner, ReplaySample(items, np.zeros(M, np.int32), np.ones(M, np.float32)))
    q_next_target, q_next_online = np.asarray(q_next_target), np.asarray(q_next_online)
    pick = np.argmax(np.where(legal, q_next_online if double_q else q_next_target, -np.inf), -1)
    expected = items.reward + 0.9 * q_next_target[np.arange(M), pick]
    q = np.asarray(network.apply(online, obs))[np.arange(M), items.action]
    np.testing.assert_allclose(td, expected - q, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sebulba_carries_masks_through_actors_learner_and_evaluation(tmp_path):
    """Masked observations of a host environment (a JAX env on the host) reach `act` through
    the actors' buffers and the learner through the trajectory: no illegal action is ever
    taken (every episode lasts one step), the probe is learned, and `evaluate` on the host
    environment respects the masks too (greedy return 1)."""
    from experiments.evaluate import evaluate
    from experiments.train import train
    from podracer.agents import algorithms
    from podracer.config import Config
    from sebulba import SebulbaConfig

    config = Config(env=EnvConfig("ProbeMaskedAction"), agent=algorithms()["ppo"].default_probe_config(),
                    total_env_steps=6_400, run_dir=str(tmp_path / "run"),
                    arch=SebulbaConfig(num_envs=16, rollout_length=8, actor_devices=(0,), learner_devices=(1, 2),
                                       updates_per_log=25))
    rows = train(config, console=False).metrics
    assert all(row["episode_length"] == 1.0 for row in rows), [row["episode_length"] for row in rows]
    assert rows[-1]["episode_return"] >= 0.9, [row["episode_return"] for row in rows]
    assert evaluate(str(tmp_path / "run"), episodes=8)["mean_return"] == 1.0
