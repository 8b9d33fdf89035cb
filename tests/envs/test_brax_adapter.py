"""The Brax adapter's own logic (`podracer.envs.brax_env`), with or without Brax installed:
a stand-in with the interface of Brax's `Env` replaces `brax.envs.get_environment`, so these
check what it is called with, the specs from its sizes, its `done` as the termination, the
action box's clipping and the time limit, in well under a second. The real environments'
tests are tests/envs/test_brax_env.py (slow; skipped without Brax)."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from podracer.envs import brax_env
from podracer.envs.brax_env import BraxEnv, brax_available, make_brax_env
from podracer.types import BoxSpec, ObsSpec
from tests.support.helpers import refuse_import


def run_steps_of(env, actions):
    """`run_steps` with an action per step (`actions [T, A]`)."""
    key = jax.random.key(0)
    state, obs = env.reset(key)

    def body(state, inputs):
        key, action = inputs
        return env.step(key, state, action)

    _, ts = jax.lax.scan(body, state, (jax.random.split(key, len(actions)), actions))
    return ts, obs


class _StandInState(NamedTuple):  # the fields of Brax's `State` the adapter reads
    obs: jax.Array
    reward: jax.Array
    done: jax.Array


class _StandInBrax:
    """Brax's `Env` interface (`reset(rng)`, `step(state, action)`, `observation_size`,
    `action_size`) on a point that moves by the sum of its two action components: the
    observation is `[position, *action]`, the reward the new position, and `done` is Brax's
    1.0 once the position reaches 2 (0.0 before)."""

    observation_size = 3
    action_size = 2

    def reset(self, rng):
        position = jax.random.uniform(rng, (1,), minval=-0.5, maxval=0.5)
        return _StandInState(jnp.concatenate([position, jnp.zeros(2)]), jnp.float32(0.0), jnp.float32(0.0))

    def step(self, state, action):
        position = state.obs[0] + action.sum()
        done = jnp.where(position >= 2.0, 1.0, 0.0)
        return _StandInState(jnp.concatenate([position[None], action]), position, done)


@pytest.fixture
def made(monkeypatch):
    """The calls of Brax's `envs.get_environment`, replaced by one that builds `_StandInBrax`."""
    calls = []

    def get_environment(name, **kwargs):
        calls.append((name, kwargs))
        return _StandInBrax()

    monkeypatch.setattr(brax_env, "_import_brax_envs", lambda: SimpleNamespace(get_environment=get_environment))
    return calls


def test_the_adapter_builds_braxs_environment_by_name_on_the_positional_pipeline(made):
    env = make_brax_env("brax/walker2d")
    assert isinstance(env, BraxEnv) and env.name == "brax/walker2d" and env.max_episode_steps(None) == 1000
    assert made == [("walker2d", {"backend": "positional"})]
    env = BraxEnv("ant", episode_length=5, backend="generalized", n_frames=2)
    assert env.name == "brax/ant" and env.max_episode_steps(None) == 5
    assert made[-1] == ("ant", {"backend": "generalized", "n_frames": 2})


def test_specs_are_the_environments_sizes_in_the_unit_box(made):
    env = BraxEnv("reacher")
    assert env.observation_spec(None) == ObsSpec((3,), np.dtype(np.float32))
    assert env.action_spec(None) == BoxSpec((2,), -1.0, 1.0)


def test_steps_clip_actions_to_the_box_end_on_braxs_done_and_truncate_at_the_episode_length(made):
    """From a start in [-0.5, 0.5): an action of (3, 0) moves the point by 1 (clipped), one of
    (-3, 0.5) by -0.5, one of (1, 1) by 2: Brax's `done` (1.0) there is a termination, with the
    position as its reward; the next episode starts afresh and, held still, is truncated at
    its 4th step (`episode_length=4`), not terminated."""
    env = BraxEnv("reacher", episode_length=4)
    actions = jnp.asarray([[3.0, 0.0], [-3.0, 0.5], [1.0, 1.0]] + [[0.0, 0.0]] * 4)
    ts, first = jax.device_get(jax.jit(lambda: run_steps_of(env, actions))())
    start = float(first[0])
    np.testing.assert_allclose(ts.final_obs[:3, 0], start + np.array([1.0, 0.5, 2.5]), rtol=1e-6)
    np.testing.assert_array_equal(ts.final_obs[:3, 1:], [[1.0, 0.0], [-1.0, 0.5], [1.0, 1.0]])
    np.testing.assert_allclose(ts.reward[:3], start + np.array([1.0, 0.5, 2.5]), rtol=1e-6)
    np.testing.assert_array_equal(ts.terminated, [0, 0, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(ts.truncated, [0, 0, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(ts.episode_length, [1, 2, 3, 1, 2, 3, 4])
    assert abs(float(ts.obs[2, 0])) <= 0.5 and not ts.obs[2, 1:].any()  # the next episode's start


def test_without_brax_the_adapter_says_which_extra_to_install(monkeypatch):
    assert brax_available() == (importlib.util.find_spec("brax") is not None)
    refuse_import(monkeypatch, "brax")
    assert not brax_available()
    with pytest.raises(ImportError, match=r"^'brax/ant' needs Brax: pip install 'podracer\[brax\]'$"):
        make_brax_env("brax/ant")
