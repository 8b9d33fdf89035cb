"""`EnvConfig.observe`: partial observability for any environment with vector observations,
the same selection for JAX and host environments, checked at setup with one-line errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.config import ConfigError, EnvConfig
from podracer.envs import make_configured_jax_env, make_jax_env
from podracer.envs.base import JaxEnv
from podracer.envs.host import host_env_specs, make_host_env
from podracer.envs.observe import ObservedHostEnv, ObservedJaxEnv, observed_spec
from podracer.types import DiscreteSpec, MaskedObs, ObsSpec

pytestmark = pytest.mark.timeout(120)


def rollout(env, steps: int, seed: int = 0):
    """`steps` vmapped steps of 8 copies under fixed keys and actions: the stacked TimeSteps."""
    params = env.default_params
    state, obs = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.key(seed), 8), params)
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    first, timesteps = obs, []
    for t in range(steps):
        action = jax.random.randint(jax.random.key(100 + t), (8,), 0, 2)
        state, timestep = step(jax.random.split(jax.random.key(t), 8), state, action, params)
        timesteps.append(timestep)
    return first, jax.tree.map(lambda *x: np.stack(x), *timesteps)


def test_jax_env_shows_only_the_selected_entries_everywhere():
    """Same keys and actions: the observed CartPole's first, next and final observations are
    the full ones' entries (0, 2), its rewards and episode ends the same (episodes end inside
    the 60 steps)."""
    full = make_jax_env("CartPole-v1")
    observed = make_configured_jax_env(EnvConfig("CartPole-v1", observe=(2, 0)))
    assert observed.observation_spec(observed.default_params) == ObsSpec(
        (2,), full.observation_spec(full.default_params).dtype)
    first_full, full_steps = rollout(full, 60)
    first, steps = rollout(observed, 60)
    np.testing.assert_array_equal(first, np.asarray(first_full)[:, [2, 0]])
    np.testing.assert_array_equal(steps.obs, full_steps.obs[..., [2, 0]])
    np.testing.assert_array_equal(steps.final_obs, full_steps.final_obs[..., [2, 0]])
    for field in ("reward", "terminated", "truncated", "episode_return"):
        np.testing.assert_array_equal(getattr(steps, field), getattr(full_steps, field))
    assert full_steps.terminated.any()


@pytest.mark.parametrize("backend", ["envpool", "gymnasium"])
def test_host_env_shows_only_the_selected_entries_everywhere(backend):
    """Same seed and actions: observations, final observations and specs of the observed
    host env are the full one's entries (0, 2), across episode ends."""
    full = make_host_env(EnvConfig("CartPole-v1", backend=backend), 4, seed=3)
    config = EnvConfig("CartPole-v1", backend=backend, observe=(0, 2))
    observed = make_host_env(config, 4, seed=3)
    assert observed.observation_spec == host_env_specs(config)[0] == ObsSpec((2,), np.float32)
    try:
        np.testing.assert_array_equal(observed.reset(), full.reset()[:, [0, 2]])
        rng, ended = np.random.default_rng(0), False
        for _ in range(60):
            action = rng.integers(0, 2, 4)
            full.send(action)
            observed.send(action)
            a, b = observed.recv(), full.recv()
            np.testing.assert_array_equal(a.timestep.obs, b.timestep.obs[:, [0, 2]])
            np.testing.assert_array_equal(a.timestep.final_obs, b.timestep.final_obs[:, [0, 2]])
            np.testing.assert_array_equal(a.episode_end, b.episode_end)
            ended |= bool(b.episode_end.any())
        assert ended
    finally:
        full.close()
        observed.close()


@pytest.mark.parametrize("observe, fragment", [((0, 4), "in [0, 4)"), ((1, 1), "distinct")])
def test_bad_indices_are_refused_naming_the_field(observe, fragment):
    for make in (make_configured_jax_env, host_env_specs):  # JAX and host environments alike
        with pytest.raises(ConfigError, match=r"env\.observe") as error:
            make(EnvConfig("CartPole-v1", observe=observe))
        assert fragment in str(error.value)


def test_non_vector_observations_are_refused():
    with pytest.raises(ConfigError, match=r"env\.observe selects entries of vector observations; Catch"):
        make_configured_jax_env(EnvConfig("Catch", observe=(0,)))


@pytest.mark.parametrize("spec, observed", [
    (ObsSpec((10, 5), np.float32), r"Catch observes \(10, 5\)"),
    (MaskedObs(ObsSpec((4,), np.float32), ObsSpec((2,), np.bool_)), "Catch observes MaskedObs"),
])
def test_non_vector_observations_are_refused_naming_what_they_are(spec, observed):
    with pytest.raises(ConfigError, match=r"env\.observe selects entries of vector observations; " + observed):
        observed_spec(spec, (0,), "Catch")


class _Scaled(JaxEnv):
    """Observations that depend on the parameters (a scale) and on the key of each call."""

    def reset_env(self, key, params):
        return jnp.zeros(()), params * (jnp.arange(4.0) + jax.random.key_data(key)[-1])

    def step_env(self, key, state, action, params):
        return state + 1, params * (jnp.arange(4.0) - jax.random.key_data(key)[-1]), jnp.float32(1), state > 2

    def observation_spec(self, params):
        return ObsSpec((4,), np.dtype(np.float32))


def test_observed_jax_env_passes_the_key_and_parameters_on():
    inner = _Scaled()
    env = ObservedJaxEnv(inner, (3, 1), "Scaled")

    def observations(key):  # of a reset and a step, observed and full
        return [e.reset_env(key, 2.0)[1] for e in (env, inner)] + [
            e.step_env(key, jnp.zeros(()), 0, 2.0)[1] for e in (env, inner)]

    obs, full, next_obs, next_full = map(np.asarray, jax.jit(observations)(jax.random.key(3)))
    np.testing.assert_array_equal(obs, full[[3, 1]])
    np.testing.assert_array_equal(next_obs, next_full[[3, 1]])
    assert len(set(full.tolist())) == 4  # the key and the scale show in every entry


class _HostStub:
    num_envs, action_spec, observation_spec = 2, DiscreteSpec(2), ObsSpec((4,), np.float32)


def test_observed_host_env_refuses_bad_indices_naming_the_environment():
    with pytest.raises(ConfigError, match=r"env\.observe indices must be in \[0, 4\) for Stub-v0, got \[0, 7\]"):
        ObservedHostEnv(_HostStub(), (0, 7), "Stub-v0")


def test_observed_jax_env_still_renders_for_evaluation_videos():
    """`evaluate --video` on a run with `--env.observe` (`ppo-lstm-masked-cartpole-anakin`):
    the observed CartPole draws its states as the full one does (rendering reads the inner
    state, which the selection leaves alone)."""
    from experiments.evaluate import _check_video
    from podracer.envs.render import can_render

    config = EnvConfig("CartPole-v1", observe=(0, 2))
    full, observed = make_jax_env("CartPole-v1"), make_configured_jax_env(config)
    assert can_render(observed) and observed.render_fps == full.render_fps
    inner, _ = observed.reset_env(jax.random.key(0), observed.default_params)
    np.testing.assert_array_equal(observed.render(inner), full.render(inner))
    _check_video(observed, None, "episode.gif")  # no ConfigError


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("preset, arch", [("ppo-cartpole-anakin", ["--arch.updates-per-call", "4"]),
                                          ("ppo-cartpole-sebulba", [])])
def test_command_line_trains_and_evaluates_on_the_observed_env(preset, arch, tmp_path, capsys):
    """`--env.observe 0,2` end to end: the run trains on 2-entry observations (its checkpoint
    holds a network over 2 inputs) and `evaluate` rebuilds the same view; a bad index exits 2
    with one line."""
    from experiments.cli import main

    run_dir = tmp_path / "run"
    main(["train", preset, "--env.observe", "0,2", "--total-env-steps", "2048", "--run-dir", str(run_dir),
          "--log.console", "false", "--log.tensorboard", "false", *arch])
    from experiments.evaluate import evaluate, load_run_config

    assert load_run_config(str(run_dir)).env.observe == (0, 2)
    result = evaluate(str(run_dir), episodes=2)
    assert result["episodes"] == 2 and np.isfinite(result["mean_return"])
    with pytest.raises(SystemExit) as exit_info:
        main(["train", preset, "--env.observe", "0,7", "--run-dir", str(tmp_path / "bad")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and "env.observe" in err[0], err
