"""The Craftax adapter: its class and name by id, Craftax's own environment built without its
auto-reset, the time limit read from the parameters (`max_timesteps`) and a `done` at it
reported as a truncation (any other as a termination), and frames as uint8. Craftax compiles
a reset (world generation) and a step slowly on a CPU (seconds to a minute): the fast tests
trace at most (`jax.eval_shape`) and read the step's flags from a scripted Craftax
`step_env`; episodes and frames of the real environment are tests/envs/test_suites.py's
slow tests."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("craftax", reason="Craftax is not installed: pip install 'podracer[craftax]'")
# imported at collection, so that no test pays for loading Craftax-Classic's textures
pytest.importorskip("craftax.craftax_classic.constants")
pytest.importorskip("craftax.craftax_classic.envs.craftax_symbolic_env")

import craftax.craftax_env  # noqa: E402
from craftax.environment_base.environment_bases import EnvironmentNoAutoReset  # noqa: E402

from podracer.envs.craftax_env import CraftaxClassicEnv, CraftaxEnv, make_suite_env, suite_ids  # noqa: E402
from podracer.envs.wrappers import WrappedState  # noqa: E402
from podracer.types import DiscreteSpec, ObsSpec  # noqa: E402

CLASSIC = "craftax/Craftax-Classic-Symbolic-v1"


@pytest.fixture(scope="module")
def env():
    return make_suite_env(CLASSIC)


def test_a_classic_id_is_the_classic_adapter_on_craftaxs_environment_without_auto_reset(env):
    params = env.default_params
    assert type(env) is CraftaxClassicEnv and env.name == CLASSIC
    assert isinstance(env.env, EnvironmentNoAutoReset)
    assert env.max_episode_steps(params) == params.max_timesteps == 10_000
    assert env.max_episode_steps(params.replace(max_timesteps=7)) == 7
    assert env.action_spec(params) == DiscreteSpec(17)
    assert env.observation_spec(params) == ObsSpec(env.env.observation_space(params).shape, np.dtype(np.float32))


def test_each_name_builds_its_adapter_class_on_craftaxs_environment_of_that_name(env, monkeypatch):
    """Only the Craftax-Classic names get the classic adapter (the one that renders); every
    name is passed to Craftax with `auto_reset=False` (here to a recorder that returns the
    classic environment, so that full Craftax's textures are not loaded)."""
    calls = []

    def make(name, auto_reset):
        calls.append((name, auto_reset))
        return env.env

    monkeypatch.setattr(craftax.craftax_env, "make_craftax_env_from_name", make)
    assert suite_ids() == (
        "craftax/Craftax-Classic-Symbolic-v1",
        "craftax/Craftax-Classic-Pixels-v1",
        "craftax/Craftax-Symbolic-v1",
        "craftax/Craftax-Pixels-v1",
    )
    kinds = {env_id: type(make_suite_env(env_id)) for env_id in suite_ids()}
    assert kinds == {
        "craftax/Craftax-Classic-Symbolic-v1": CraftaxClassicEnv,
        "craftax/Craftax-Classic-Pixels-v1": CraftaxClassicEnv,
        "craftax/Craftax-Symbolic-v1": CraftaxEnv,
        "craftax/Craftax-Pixels-v1": CraftaxEnv,
    }
    assert calls == [(env_id.removeprefix("craftax/"), False) for env_id in suite_ids()]
    assert make_suite_env("craftax/Craftax-Pixels-v1").name == "craftax/Craftax-Pixels-v1"


def test_an_unknown_name_is_a_key_error_naming_it():
    with pytest.raises(KeyError) as error:
        make_suite_env("craftax/Craftax-Nowhere-v1")
    assert error.value.args == ("Craftax-Nowhere-v1",)


class _State(NamedTuple):  # the field of Craftax's EnvState the adapter reads
    timestep: jax.Array


class _Scripted:
    """A Craftax environment whose `step_env` returns the `done` and the step count (the
    state's `timestep`) it was built with."""

    def __init__(self, done, timestep):
        self.done, self.timestep = done, timestep

    def step_env(self, key, state, action, params):
        return jnp.zeros(3), _State(jnp.int32(self.timestep)), jnp.float32(0.5), jnp.bool_(self.done), {}


@pytest.mark.parametrize(
    "done, timestep, terminated, truncated",
    [(True, 7, False, True), (True, 8, False, True), (True, 6, True, False), (False, 7, False, False)],
)
def test_a_done_at_the_time_limit_truncates_and_any_other_terminates(done, timestep, terminated, truncated):
    """Craftax's `done` includes its time limit (`timestep >= max_timesteps`, here 7): a
    `done` at or past it is the adapter's truncation, an earlier one (the player died) a
    termination."""
    adapter = CraftaxClassicEnv(CLASSIC.removeprefix("craftax/"))
    adapter.env = _Scripted(done, timestep)
    params = adapter.default_params.replace(max_timesteps=7)
    state = WrappedState(None, jnp.int32(timestep - 1), jnp.bool_(False))
    inner, _, reward, ended = adapter.step_env(jax.random.key(0), state, jnp.int32(0), params)
    assert bool(ended) == terminated and bool(adapter.own_truncation(inner, params)) == truncated
    assert float(reward) == 0.5 and int(inner.env_state.timestep) == timestep


def test_a_frame_is_the_renderers_pixels_clipped_to_uint8(env):
    """Traced with Craftax's renderer: the player's view, `uint8 [63, 63, 3]`. With the
    renderer replaced by the identity, the pixels are clipped to [0, 255], then cast."""
    params = env.default_params
    state = jax.eval_shape(lambda key: env.reset_env(key, params)[0], jax.random.key(0))
    assert jax.eval_shape(env.render, state) == jax.ShapeDtypeStruct((63, 63, 3), jnp.uint8)

    adapter = CraftaxClassicEnv(CLASSIC.removeprefix("craftax/"))
    adapter._render_pixels = lambda pixels: pixels
    frame = adapter.render(WrappedState(jnp.asarray([-3.0, 0.0, 12.7, 255.0, 300.0]), jnp.int32(0), jnp.bool_(False)))
    assert frame.dtype == jnp.uint8
    np.testing.assert_array_equal(frame, [0, 0, 12, 255, 255])
