"""SAC and TD3: their maths against oracles (distrax, hand-computed values, brute force), the
agents' update rules (twin minimum, Polyak targets, TD3's delays, the temperature), acting in
the box, memory estimates, and an exact resume of an Anakin run with its buffers."""

from __future__ import annotations

import dataclasses

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anakin import AnakinConfig
from experiments import train as train_lib
from podracer.agents import SACConfig, TD3Config, make_agent
from podracer.agents.continuous import replay_learning
from podracer.agents.dqn import transitions_at
from podracer.config import Config, ConfigError, EnvConfig
from podracer.envs import make_jax_env
from podracer.ops import continuous_q
from podracer.types import ObsSpec, Trajectory, box_spec
from tests.experiments.test_train import StopAfter
from tests.support.contract_helpers import probe_trajectory
from tests.support.helpers import assert_trees_equal

PROBE = "ProbeContinuousAction"


def probe_agent(config, env_id: str = PROBE):
    env = make_jax_env(env_id)
    return make_agent(config, env.observation_spec(None), env.action_spec(None), num_updates=10, axis_name=None)


# The squashed Gaussian.


def test_squashed_log_prob_equals_distrax_transformed_tanh():
    """`log pi(tanh(u))` against distrax's `Transformed(Normal, Tanh)` summed over the action
    components, where distrax's `atanh` is accurate (|u| <= 3)."""
    key = jax.random.key(0)
    mean = jax.random.normal(key, (64, 3))
    log_std = jax.random.uniform(jax.random.key(1), (64, 3), minval=-2.0, maxval=0.5)
    u = jnp.clip(mean + jnp.exp(log_std) * jax.random.normal(jax.random.key(2), (64, 3)), -3.0, 3.0)
    oracle = distrax.Transformed(distrax.Normal(mean, jnp.exp(log_std)), distrax.Tanh()).log_prob(jnp.tanh(u))
    np.testing.assert_allclose(continuous_q.squashed_gaussian_log_prob(mean, log_std, u), oracle.sum(-1),
                               rtol=1e-4, atol=1e-4)


def test_tanh_log_det_jacobian_is_stable_where_tanh_saturates():
    """`log(1 - tanh(u)^2)`: equal to the naive form where that is accurate, finite and on its
    asymptote `2 log 2 - 2 |u|` where `1 - tanh(u)^2` rounds to 0 in float32."""
    u = jnp.array([-0.5, 0.0, 1.0, 2.0])
    np.testing.assert_allclose(continuous_q.tanh_log_det_jacobian(u), jnp.log(1 - jnp.tanh(u) ** 2), rtol=1e-5)
    big = jnp.array([-30.0, 30.0, 100.0])
    with np.errstate(divide="ignore"):
        assert not np.isfinite(np.log(1 - np.tanh(np.float32(30.0)) ** 2))
    np.testing.assert_allclose(continuous_q.tanh_log_det_jacobian(big), 2 * np.log(2) - 2 * np.abs(big), rtol=1e-6)


def test_squashed_sample_matches_a_numerical_change_of_variables():
    """For one action component the density of `tanh(u)` integrates to 1 over (-1, 1)
    (a numerical change of variables), and a sample's log-prob is the formula's at its `u`."""
    mean, log_std = jnp.array([[0.7]]), jnp.array([[-0.3]])
    a = jnp.linspace(-1 + 1e-6, 1 - 1e-6, 200_001)[:, None]
    density = jnp.exp(continuous_q.squashed_gaussian_log_prob(jnp.broadcast_to(mean, a.shape),
                                                              jnp.broadcast_to(log_std, a.shape), jnp.arctanh(a)))
    np.testing.assert_allclose(float(jnp.trapezoid(density, a[:, 0])), 1.0, atol=1e-3)
    action, log_prob = continuous_q.squashed_gaussian_sample(jax.random.key(0), mean, log_std)
    np.testing.assert_allclose(log_prob, continuous_q.squashed_gaussian_log_prob(mean, log_std, jnp.arctanh(action)),
                               rtol=1e-4)


def test_box_maps_are_inverse_and_the_log_scale_is_the_stretch():
    low, high = np.array([-2.0, 0.0]), np.array([2.0, 1.0])
    unit = jnp.array([[-1.0, 1.0], [0.0, -0.5]])
    box = continuous_q.to_box(unit, low, high)
    np.testing.assert_allclose(box, [[-2.0, 1.0], [0.0, 0.25]])
    np.testing.assert_allclose(continuous_q.from_box(box, low, high), unit, atol=1e-6)
    np.testing.assert_allclose(continuous_q.box_log_scale(low, high), np.log(2.0) + np.log(0.5))


# Targets and losses on hand-made batches.


def test_soft_target_takes_the_twin_minimum_and_the_entropy_bonus():
    r, d = jnp.array([1.0, 0.0]), jnp.array([0.9, 0.0])
    q1, q2, log_prob = jnp.array([2.0, 5.0]), jnp.array([3.0, -5.0]), jnp.array([-1.0, 4.0])
    np.testing.assert_allclose(continuous_q.soft_q_target(r, d, q1, q2, log_prob, 0.5),
                               [1.0 + 0.9 * (2.0 + 0.5), 0.0])
    np.testing.assert_allclose(continuous_q.clipped_double_q_target(r, d, q1, q2), [1.0 + 0.9 * 2.0, 0.0])
    np.testing.assert_allclose(continuous_q.twin_q_loss(jnp.array([1.0, 2.0]), jnp.array([0.0, 0.0]),
                                                        jnp.array([1.0, 1.0])), 0.5 + 1.0)


@pytest.mark.parametrize("entropy, grows", [(-3.0, True), (1.0, False)])
def test_temperature_grows_when_entropy_is_below_target(entropy, grows):
    """Gradient descent on the temperature loss raises alpha when the policy's entropy
    (`-log pi`) is below the target (-1 here), lowers it when above."""
    log_prob = jnp.full((8,), -entropy)
    grad = jax.grad(continuous_q.temperature_loss)(jnp.float32(0.0), log_prob, -1.0)
    assert (grad < 0) == grows and grad != 0


def test_target_smoothing_clips_the_noise_and_the_action():
    # 4096 draws: noise left unclipped 1% of the time passes with p = 0.99**4096 < 1e-17
    action = jnp.array([[0.9, -0.2, 0.0]] * 4096)
    smoothed = continuous_q.smoothed_target_action(jax.random.key(0), action, noise_std=10.0, noise_clip=0.5)
    assert float(jnp.max(jnp.abs(smoothed - action))) <= 0.5 + 1e-6
    assert float(jnp.max(smoothed)) <= 1.0 and float(jnp.min(smoothed)) >= -1.0
    # noise of std 10 is clipped to +-0.5 all but ~4% of the time
    at_bound = np.isclose(np.asarray(smoothed[:, 1]), -0.7, atol=1e-6) | np.isclose(np.asarray(smoothed[:, 1]), 0.3,
                                                                                     atol=1e-6)
    assert at_bound.mean() > 0.9
    assert float(jnp.max(smoothed[:, 0])) == 1.0  # 0.9 + 0.5 clipped to the box
    np.testing.assert_array_equal(continuous_q.smoothed_target_action(jax.random.key(0), action, 0.0, 0.5), action)


@pytest.mark.costly
def test_n_step_targets_across_episode_ends():
    """The buffer's n-step (n = 3) targets of one environment's stream with a termination after
    step 2 and a truncation after step 5: returns stop at episode ends, a terminated episode
    has discount 0, a truncated one bootstraps (gamma^m) from its final observation."""
    gamma, T = 0.5, 8
    config = SACConfig(buffer_size=64, batch_size=4, n_step=3, gamma=gamma)
    replay = replay_learning.make_buffer(config)
    obs_spec, action_spec = ObsSpec((1,), jnp.float32), box_spec((1,), -1.0, 1.0)
    local = replay.init(replay_learning.example_step(obs_spec, action_spec))
    reward = jnp.arange(1.0, T + 1)[:, None]
    terminated = jnp.zeros((T, 1), bool).at[2].set(True)
    truncated = jnp.zeros((T, 1), bool).at[5].set(True)
    obs = jnp.arange(T, dtype=jnp.float32)[:, None, None]
    traj = Trajectory(obs, jnp.zeros((T, 1, 1)), reward, terminated, truncated, obs + 100.0, {})
    local = replay.add(local, replay_learning.to_steps(traj, jnp.array([False])))
    items = transitions_at(replay, local, jnp.arange(5), 1, config)
    expected_return = [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3, 4 + 0.5 * 5 + 0.25 * 6, 5 + 0.5 * 6]
    np.testing.assert_allclose(items.reward, expected_return)
    np.testing.assert_allclose(items.discount, [0.0, 0.0, 0.0, 0.125, 0.25])
    np.testing.assert_allclose(items.next_obs[3:, 0], [105.0, 105.0])  # the truncated episode's final obs


# The agents' update rules.


def one_update(config, steps: int = 1):
    agent = probe_agent(config)
    state = jax.jit(agent.init)(jax.random.key(0))
    traj = probe_trajectory(PROBE, agent, state.params, 8, 8)
    update = jax.jit(agent.update)
    states = [state]
    for i in range(steps):
        states.append(update(states[-1], traj, jax.random.key(i))[0])
    return states


@pytest.mark.parametrize("config", [SACConfig(buffer_size=256, batch_size=32, learning_starts=0, tau=0.25),
                                    TD3Config(buffer_size=256, batch_size=32, learning_starts=0, tau=0.25,
                                              policy_delay=1)], ids=["sac", "td3"])
@pytest.mark.costly
def test_target_critics_are_polyak_averages(config):
    before, after = one_update(config)
    expected = jax.tree.map(lambda new, old: 0.25 * new + 0.75 * old, after.opt_state.critic,
                            before.opt_state.target_critic)
    assert_trees_equal(after.opt_state.target_critic, expected, rtol=1e-5, atol=1e-6)


def test_td3_updates_actor_and_targets_every_policy_delay_steps():
    config = TD3Config(buffer_size=256, batch_size=32, learning_starts=0, policy_delay=2, tau=0.5)
    states = one_update(config, steps=4)

    def moved(a, b) -> bool:
        return any(not np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))

    actor = [moved(states[i + 1].params.actor, states[i].params.actor) for i in range(4)]
    target_actor = [moved(states[i + 1].opt_state.extra, states[i].opt_state.extra) for i in range(4)]
    target_critic = [moved(states[i + 1].opt_state.target_critic, states[i].opt_state.target_critic)
                     for i in range(4)]
    critic = [moved(states[i + 1].opt_state.critic, states[i].opt_state.critic) for i in range(4)]
    assert critic == [True] * 4
    assert actor == target_actor == target_critic == [False, True, False, True]


@pytest.mark.slow
def test_sac_temperature_moves_only_with_autotune():
    base = SACConfig(buffer_size=256, batch_size=32, learning_starts=0)
    tuned = one_update(base)[-1].opt_state.extra.log_temperature
    fixed = one_update(dataclasses.replace(base, autotune=False, initial_temperature=0.2))[-1]
    assert float(tuned) != 0.0
    np.testing.assert_allclose(fixed.opt_state.extra.log_temperature, np.log(0.2), rtol=1e-6)


@pytest.mark.parametrize("config", [SACConfig(learning_starts=10**6), SACConfig(learning_starts=0),
                                    TD3Config(learning_starts=0, exploration_noise=5.0)],
                         ids=["random", "sac", "td3-noisy"])
@pytest.mark.costly
def test_actions_are_inside_the_box(config):
    """Pendulum's box is [-2, 2]: random actions before learning_starts spread over it,
    policy actions and greedy actions stay inside it."""
    env = make_jax_env("Pendulum-v1")
    agent = make_agent(config, env.observation_spec(None), env.action_spec(None), num_updates=1, axis_name=None)
    params = agent.init(jax.random.key(0)).params
    obs = jax.random.normal(jax.random.key(1), (4096, 3)) * 5
    action, _ = jax.jit(agent.act)(params, obs, jax.random.key(2))
    greedy = jax.jit(agent.greedy_act)(params, obs)
    for a in (action, greedy):
        assert a.shape == (4096, 1) and a.dtype == jnp.float32
        assert float(a.min()) >= -2.0 and float(a.max()) <= 2.0
    if config.learning_starts:
        assert float(action.min()) < -1.9 and float(action.max()) > 1.9
        assert abs(float(action.mean())) < 0.1


# Memory.


def test_bytes_per_transition_and_a_halfcheetah_buffer():
    """HalfCheetah (obs 17, act 6): 2 x 68 bytes of observations, 24 of action, 4 of reward, 3
    flags = 167 bytes, so a 1M-transition buffer is 167 MB (a laptop holds it)."""
    size = replay_learning.bytes_per_transition(ObsSpec((17,), jnp.float32), box_spec((6,), -1.0, 1.0))
    assert size == 167
    assert size * 1_000_000 < 2**30


def test_a_buffer_larger_than_the_device_is_a_config_error(monkeypatch):
    class Small:
        device_kind = "tiny"

        def memory_stats(self):
            return {"bytes_limit": 10**6}

    monkeypatch.setattr(replay_learning.jax, "devices", lambda: [Small()])
    with pytest.raises(ConfigError, match="agent.buffer_size"):
        probe_agent(SACConfig(buffer_size=1_000_000))
    probe_agent(SACConfig(buffer_size=1_000, batch_size=32))  # 1000 x 13 bytes fits


# Resume.


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("config", [SACConfig, TD3Config], ids=["sac", "td3"])
def test_stop_and_resume_is_exact_with_the_buffers(config, tmp_path):
    """An Anakin run stopped after 2 host calls and resumed ends with the state (buffers in
    `local` included) of the same run uninterrupted."""
    run = Config(env=EnvConfig(PROBE), total_env_steps=8 * 4 * 12,
                 agent=config(buffer_size=512, batch_size=16, learning_starts=64, hidden_sizes=(16,), n_step=2),
                 arch=AnakinConfig(num_envs=4, rollout_length=8, updates_per_call=3, devices=(0, 1)))
    full = train_lib.train(dataclasses.replace(run, run_dir=str(tmp_path / "full")), console=False)
    first = train_lib.train(dataclasses.replace(run, run_dir=str(tmp_path / "stopped")), console=False,
                            should_stop=StopAfter(2))
    assert first.stopped
    last = train_lib.resume(str(tmp_path / "stopped"))
    assert replay_learning.ContinuousParams is type(last.state.agent.params)
    assert int(np.asarray(last.state.agent.local.current_index).max()) > 0
    assert_trees_equal(last.state, full.state)


@pytest.mark.slow
@pytest.mark.parametrize("make", [SACConfig, TD3Config], ids=["sac", "td3"])
def test_simba_torso_and_several_gradient_steps(make):
    """The SimBa torso (residual LayerNorm blocks) in actor and critics, 3 gradient steps per
    update: the update takes them, its losses are finite, the parameters move."""
    config = make(buffer_size=256, batch_size=32, learning_starts=0, torso="simba", hidden_sizes=(32,),
                  simba_blocks=1, gradient_steps=3)
    agent = probe_agent(config)
    state = jax.jit(agent.init)(jax.random.key(0))
    assert "LayerNorm_0" in state.params.actor["params"]["torso"]
    traj = probe_trajectory(PROBE, agent, state.params, 8, 8)
    new, metrics = jax.jit(agent.update)(state, traj, jax.random.key(1))
    assert float(metrics["gradient_steps"]) == 3.0 and int(new.opt_state.gradient_steps) == 3
    assert np.isfinite(float(metrics["loss"])) and np.isfinite(float(metrics["actor_loss"]))
    assert not np.array_equal(jax.tree.leaves(new.opt_state.critic)[0], jax.tree.leaves(state.opt_state.critic)[0])
