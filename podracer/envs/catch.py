"""Catch, the Podracer paper's own example environment, with no dependencies.

A ball falls from a random column of the top row of a `rows x columns` grid, one row a
step; the agent moves a paddle on the bottom row left, not at all, or right. Reward +1 when
the paddle catches the ball, -1 when it misses; the episode then terminates.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from podracer.envs.base import JaxEnv
from podracer.envs.render import grid_frame
from podracer.types import DiscreteSpec, ObsSpec


@struct.dataclass
class CatchState:
    ball_x: jax.Array
    ball_y: jax.Array
    paddle_x: jax.Array


class Catch(JaxEnv):
    name = "Catch"
    render_fps = 4

    def __init__(self, rows: int = 10, columns: int = 5):
        self.rows, self.columns = rows, columns

    def reset_env(self, key, params):
        ball_x = jax.random.randint(key, (), 0, self.columns)
        state = CatchState(ball_x, jnp.zeros((), jnp.int32), jnp.asarray(self.columns // 2))
        return state, self._obs(state)

    def step_env(self, key, state, action, params):
        paddle_x = jnp.clip(state.paddle_x + action - 1, 0, self.columns - 1)
        state = CatchState(state.ball_x, state.ball_y + 1, paddle_x)
        terminated = state.ball_y == self.rows - 1
        caught = state.ball_x == paddle_x
        reward = jnp.where(terminated, jnp.where(caught, 1.0, -1.0), 0.0)
        return state, self._obs(state), reward, terminated

    def _obs(self, state: CatchState) -> jax.Array:
        board = jnp.zeros((self.rows, self.columns), jnp.float32)
        board = board.at[state.ball_y, state.ball_x].set(1.0)
        return board.at[self.rows - 1, state.paddle_x].set(1.0)

    def render(self, state: CatchState) -> jax.Array:
        """The board as an RGB frame: ball orange, paddle blue."""
        cells = jnp.zeros((self.rows, self.columns), jnp.int32)
        cells = cells.at[self.rows - 1, state.paddle_x].set(2)
        cells = cells.at[state.ball_y, state.ball_x].set(1)
        return grid_frame(cells, [(245, 245, 245), (230, 120, 30), (40, 100, 200)])

    def max_episode_steps(self, params: Any) -> int:
        return self.rows  # never reached: the ball lands after rows - 1 steps

    def observation_spec(self, params: Any) -> ObsSpec:
        return ObsSpec((self.rows, self.columns), jnp.dtype(jnp.float32))

    def action_spec(self, params: Any) -> DiscreteSpec:
        return DiscreteSpec(3)
