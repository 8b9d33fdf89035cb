"""The optional suites by id (`navix/`, `jumanji/`, `craftax/`, `xminigrid/`): each id
builds and passes the setup check, trains a few updates under Anakin on 1 and 4 devices and
steps under Sebulba's JAX backend. A suite that is not installed skips its tests (naming
its extra) and is an UnknownEnvError naming the extra to install."""

import importlib
import sys

import jax
import numpy as np
import pytest

import podracer
from podracer.config import EnvConfig
from podracer.envs import UnknownEnvError, jax_env_ids, make_configured_jax_env, make_jax_env
from podracer.types import DiscreteSpec, MaskedObs

# id, the module that must import, its extra; Craftax's world generation makes its
# programs slow to compile on a CPU (minutes), so its training runs are marked slow.
SUITES = {
    "navix": ("navix/Navix-Empty-5x5-v0", "navix"),
    "xminigrid": ("xminigrid/MiniGrid-Empty-5x5", "xminigrid"),
    "jumanji": ("jumanji/Snake-v1", "jumanji"),
    "craftax": ("craftax/Craftax-Classic-Symbolic-v1", "craftax.craftax_env"),
}


def _suite(name):
    """The suite's id, after skipping the test when the suite is not installed."""
    env_id, module = SUITES[name]
    try:
        importlib.import_module(module)
    except ImportError:
        pytest.skip(f"{name} is not installed: pip install 'podracer[{name}]'")
    return env_id


def _params(names):
    return [pytest.param(name, marks=pytest.mark.slow) if name == "craftax" else name for name in names]


@pytest.mark.parametrize("name", list(SUITES))
@pytest.mark.costly
def test_a_suite_id_builds_and_passes_the_setup_check(name):
    env_id = _suite(name)
    assert env_id in jax_env_ids()
    env = make_configured_jax_env(EnvConfig(env_id))  # check_env_outputs and check_batched_step
    params = env.default_params
    assert isinstance(env.action_spec(params), DiscreteSpec)
    state, obs = jax.jit(env.reset)(jax.random.key(0), params)
    _, step = jax.jit(env.step)(jax.random.key(1), state, np.int32(0), params)
    assert jax.tree.structure(step.obs) == jax.tree.structure(obs)
    if name == "jumanji":  # Snake's observation: grid, step_count and its action_mask
        assert isinstance(obs, MaskedObs) and set(obs.obs) == {"grid", "step_count"}


@pytest.mark.parametrize("name,field,value", [("navix", "max_steps", 7), ("xminigrid", "max_steps", 7),
                                              pytest.param("craftax", "max_timesteps", 7, marks=pytest.mark.slow)])
def test_env_params_reach_a_suites_parameters(name, field, value):
    env_id = _suite(name)
    env = make_configured_jax_env(EnvConfig(env_id, params=(f"{field}={value}",)))
    assert int(env.max_episode_steps(env.default_params)) == value


def _anakin(env_id, tmp_path, devices):
    return podracer.presets.get(
        "ppo-cartpole-anakin", env=dict(id=env_id), total_env_steps=128, run_dir=str(tmp_path / "run"),
        arch=dict(num_envs=8, rollout_length=8, updates_per_call=1, devices=tuple(range(devices))),
        agent=dict(hidden_sizes=(16,), num_minibatches=2, torso="multi_encoder" if "jumanji" in env_id else "mlp"),
        log=dict(console=False, tensorboard=False))


@pytest.mark.parametrize("name", _params(SUITES))
@pytest.mark.parametrize("devices", [1, pytest.param(4, marks=pytest.mark.slow)])
@pytest.mark.costly
def test_a_suite_trains_under_anakin(name, devices, tmp_path):
    result = podracer.train(_anakin(_suite(name), tmp_path, devices), console=False)
    assert result.metrics[-1]["env_steps"] == 128
    assert all(np.isfinite(row["loss"]) for row in result.metrics if "loss" in row)


@pytest.mark.slow
@pytest.mark.parametrize("name", _params(SUITES))
def test_a_suite_steps_under_sebulba_jax_backend(name, tmp_path):
    config = podracer.presets.get(
        "ppo-cartpole-sebulba", env=dict(id=_suite(name), backend="jax"), total_env_steps=4 * 8 * 2,
        run_dir=str(tmp_path / "run"), arch=dict(num_envs=4, rollout_length=8, actor_devices=(0,),
                                                 learner_devices=(0,)),
        agent=dict(hidden_sizes=(16,), num_minibatches=1, torso="multi_encoder" if name == "jumanji" else "mlp"),
        log=dict(console=False, tensorboard=False))
    result = podracer.train(config, console=False)
    assert result.metrics[-1]["env_steps"] == 64


@pytest.mark.parametrize("name", list(SUITES))
def test_a_suite_that_is_not_installed_is_an_unknown_env_error_naming_its_extra(name, monkeypatch):
    env_id, module = SUITES[name]
    monkeypatch.setitem(sys.modules, module.split(".")[0], None)  # `import` raises ImportError
    with pytest.raises(UnknownEnvError, match=rf"pip install 'podracer\[{name}\]'"):
        make_jax_env(env_id)
    assert not any(known.startswith(name + "/") for known in jax_env_ids())


@pytest.mark.parametrize("name", list(SUITES))
def test_an_id_a_suite_does_not_know_is_an_unknown_env_error_with_close_matches(name):
    env_id = _suite(name)
    with pytest.raises(UnknownEnvError, match="did you mean"):
        make_jax_env(env_id[:-1] + "9")


@pytest.mark.parametrize("name", _params(["navix", "xminigrid", "craftax"]))
@pytest.mark.costly
def test_suites_that_can_render_draw_frames_under_vmap(name):
    """What `podracer evaluate --video` does with an episode's inner states."""
    from podracer.envs.render import can_render

    env = make_configured_jax_env(EnvConfig(_suite(name)))
    assert can_render(env)
    params = env.default_params
    inner, _ = jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(jax.random.key(0), 2), params)
    frames = jax.jit(jax.vmap(env.render))(inner)
    assert frames.dtype == np.uint8 and frames.ndim == 4 and frames.shape[0] == 2 and frames.shape[-1] == 3
    assert int(frames.max()) > int(frames.min())


def test_jumanji_cannot_render():
    from podracer.envs.render import can_render

    assert not can_render(make_configured_jax_env(EnvConfig(_suite("jumanji"))))
