"""The XLand-MiniGrid adapter against XLand-MiniGrid's own environment and MiniGrid's rules
worked by hand: termination vs truncation, rewards, starts and frames. XLand-MiniGrid compiles
its step slowly on a CPU (seconds): the fast tests compile a reset and a frame at most and read
the step's flags from a scripted timestep; whole episodes and a random start are slow tests."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("xminigrid", reason="XLand-MiniGrid is not installed: pip install 'podracer[xminigrid]'")

from podracer.envs.wrappers import WrappedState  # noqa: E402
from podracer.envs.xminigrid_env import XMiniGridEnv  # noqa: E402
from podracer.types import DiscreteSpec  # noqa: E402

FORWARD, RIGHT = 0, 1  # XLand-MiniGrid's actions
TURNS = [RIGHT] * 6  # on the spot
# from the start, (1, 1) facing east, to the goal in the far corner, (3, 3): two steps east,
# a right turn, two steps south
TO_GOAL = [FORWARD, FORWARD, RIGHT, FORWARD, FORWARD]


@pytest.fixture(scope="module")
def env():
    return XMiniGridEnv("MiniGrid-Empty-5x5")


def test_the_adapter_is_named_by_its_id_with_xminigrids_actions_and_limit(env):
    params = env.default_params.replace(max_steps=6)
    assert env.name == "xminigrid/MiniGrid-Empty-5x5" and env.action_spec(params) == DiscreteSpec(6)
    assert env.max_episode_steps(params) == 6


class _Last(NamedTuple):  # the fields of a dm_env-style timestep the adapter reads
    step_type: jax.Array
    discount: jax.Array
    observation: jax.Array
    reward: jax.Array


class _Scripted:
    """Returns the timestep it was built with from `step`."""

    def __init__(self, timestep):
        self.timestep = timestep

    def step(self, params, timestep, action):
        return self.timestep


@pytest.mark.parametrize(
    "step_type, discount, done, truncated",
    [(2, 0.0, True, False), (2, 1.0, True, True), (1, 1.0, False, False), (1, 0.0, False, False)],
)
def test_a_last_step_with_discount_0_terminates_and_one_with_discount_1_truncates(step_type, discount, done, truncated):
    """dm_env's convention (`StepType.LAST == 2`), read from the timestep XLand-MiniGrid's `step` returns."""
    env = XMiniGridEnv.__new__(XMiniGridEnv)
    timestep = _Last(jnp.int32(step_type), jnp.float32(discount), jnp.zeros(3), jnp.float32(0.5))
    env.env = _Scripted(timestep)
    state = WrappedState(None, jnp.int32(0), jnp.bool_(False))
    out, obs, reward, last, cut = env._step(jax.random.key(0), state, jnp.int32(0), None)
    assert out is timestep and obs is timestep.observation and float(reward) == 0.5
    assert bool(last) == done and bool(cut) == truncated


@pytest.mark.slow
def test_an_episode_cut_by_its_limit_and_one_that_reaches_the_goal(env):
    """With `max_steps=6`: 6 turns end in XLand-MiniGrid's own truncation (not a termination),
    reward 0; from the start, the goal ends the episode at its 5th step, a termination with
    MiniGrid's reward `1 - 0.9 * 5 / 6 = 0.25`. The first observation is XLand-MiniGrid's own."""
    params = env.default_params.replace(max_steps=6)

    @jax.jit
    def run(key):
        first, obs = env.reset_env(key, params)

        def body(state, inputs):
            action, restart = inputs
            state = jax.tree.map(lambda a, b: jnp.where(restart, a, b), first, state)
            state, _, reward, terminated = env.step_env(key, state, action, params)
            return state, (reward, terminated, env.own_truncation(state, params))

        actions = jnp.asarray(TURNS + TO_GOAL, jnp.int32)
        restarts = jnp.arange(len(actions)) == len(TURNS)
        return obs, env.env.reset(params, key).observation, jax.lax.scan(body, first, (actions, restarts))[1]

    obs, raw_obs, (reward, terminated, truncated) = jax.device_get(run(jax.random.key(0)))
    np.testing.assert_array_equal(obs, raw_obs)
    np.testing.assert_allclose(reward, [0] * 10 + [0.25], rtol=1e-6)
    np.testing.assert_array_equal(terminated, [0] * 10 + [1])
    np.testing.assert_array_equal(truncated, [0] * 5 + [1] + [0] * 5)


@pytest.mark.costly
def test_a_random_start_is_drawn_from_the_resets_key():
    """MiniGrid-EmptyRandom-5x5 places the agent by the reset's key: four keys, more than one
    start (MiniGrid-Empty-5x5, the fast tests' id, always starts at (1, 1))."""
    env = XMiniGridEnv("MiniGrid-EmptyRandom-5x5")
    params = env.default_params
    keys = jax.random.split(jax.random.key(0), 4)
    states, _ = jax.jit(jax.vmap(lambda key: env.reset_env(key, params)))(keys)
    positions = np.asarray(states.env_state.state.agent.position)
    assert len({tuple(p) for p in positions}) > 1


def test_a_frame_draws_each_tile_by_its_kind_and_the_agent_in_red(env):
    """The agent moved one tile east of the start, to row 1, column 2: the centre of each 24-pixel
    tile is its kind's colour (walls dark grey, the goal green, the floor light grey)."""
    params = env.default_params

    state, _ = jax.jit(env.reset_env, static_argnums=1)(jax.random.key(0), params)
    inner = state.env_state.state
    np.testing.assert_array_equal(inner.agent.position, [1, 1])  # the start
    inner = inner.replace(agent=inner.agent.replace(position=jnp.asarray([1, 2], inner.agent.position.dtype)))
    image = np.asarray(jax.jit(env.render)(state.replace(env_state=state.env_state.replace(state=inner))))
    assert image.shape == (5 * 24, 5 * 24, 3) and image.dtype == np.uint8
    centre = {(row, column): tuple(image[row * 24 + 12, column * 24 + 12]) for row in range(5) for column in range(5)}
    assert centre[1, 2] == (220, 40, 40)  # the agent
    assert centre[3, 3] == (40, 170, 60)  # the goal
    assert centre[0, 0] == centre[4, 2] == (110, 110, 110)  # walls
    assert centre[1, 1] == centre[2, 1] == (235, 235, 235)  # floor
