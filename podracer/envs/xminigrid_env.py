"""XLand-MiniGrid environments (`pip install 'podracer[xminigrid]'`) as podracer `JaxEnv`s:
`xminigrid/<id>`.

An id is `xminigrid/` and one of XLand-MiniGrid's registered ids
(`xminigrid/MiniGrid-Empty-5x5`, `xminigrid/XLand-MiniGrid-R1-9x9`, ...:
`xminigrid.registered_environments()`). Its `reset(params, key)` and `step(params,
timestep, action)` return dm_env-style timesteps, read as `TimeStepEnv` reads them (a last
step with discount 0 terminates; its time limit, `params.max_steps`, truncates). The
parameters are XLand-MiniGrid's `EnvParams` (`--env.params max_steps=50`). Observations are
its `uint8 [V, V, 2]` egocentric view (tile, colour); videos draw the whole grid
(`XMiniGridEnv.render`). XLand's meta-RL rulesets (benchmarks
downloaded at run time) are not loaded: each id runs with the ruleset its parameters hold.
Checked with xminigrid 0.9.3 and jax 0.10.2.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from podracer.envs.render import grid_frame
from podracer.envs.wrappers import WrappedJaxEnv, WrappedState
from podracer.types import Array, DiscreteSpec, PRNGKey

PREFIX = "xminigrid/"
EXTRA = "xminigrid"
# XLand-MiniGrid is the optional extra `EXTRA`: imported where used, so this module imports without it.
_LAST = 2  # dm_env's StepType.LAST
# a colour per XLand-MiniGrid tile id (EMPTY, FLOOR, WALL, BALL, SQUARE, PYRAMID, GOAL, KEY,
# DOOR_LOCKED, DOOR_CLOSED, DOOR_OPEN, HEX, STAR), then the agent's
_PALETTE = ((0, 0, 0), (235, 235, 235), (110, 110, 110), (60, 90, 200), (200, 120, 40), (160, 60, 200),
            (40, 170, 60), (220, 200, 40), (140, 80, 30), (170, 110, 60), (230, 200, 160), (60, 200, 200),
            (240, 140, 200), (220, 40, 40))


def suite_ids() -> tuple[str, ...]:
    """`xminigrid/<id>` for every registered id; empty when XLand-MiniGrid is not installed."""
    try:
        import xminigrid
    except ImportError:
        return ()
    return tuple(PREFIX + name for name in xminigrid.registered_environments())


class XMiniGridEnv(WrappedJaxEnv):
    """An XLand-MiniGrid environment by its registered id, `XMiniGridEnv("MiniGrid-Empty-5x5")`."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        import xminigrid

        env, params = xminigrid.make(name, **kwargs)
        super().__init__(env, params, None, PREFIX + name)

    def _reset(self, key: PRNGKey, params: Any) -> tuple[Any, Array]:
        timestep = self.env.reset(params, key)
        return timestep, timestep.observation

    def _step(self, key: PRNGKey, state: WrappedState, action: Array,
              params: Any) -> tuple[Any, Array, Array, Array, Array]:
        timestep = self.env.step(params, state.env_state, action)
        last = timestep.step_type == _LAST
        return timestep, timestep.observation, timestep.reward, last, last & (jnp.asarray(timestep.discount) > 0)

    def max_episode_steps(self, params: Any) -> int:
        return params.max_steps

    def action_spec(self, params: Any) -> DiscreteSpec:
        return DiscreteSpec(int(self.env.num_actions(self._params)))

    def render(self, state: WrappedState) -> Array:
        """The whole grid, a tile's colour by its kind and the agent in red,
        `uint8 [H * 24, W * 24, 3]` (`podracer.envs.render.grid_frame`)."""
        inner = state.env_state.state
        row, column = inner.agent.position[0], inner.agent.position[1]
        cells = inner.grid[..., 0].astype(jnp.int32).at[row, column].set(len(_PALETTE) - 1)
        return grid_frame(cells, jnp.asarray(_PALETTE, jnp.uint8))


def make_suite_env(env_id: str) -> XMiniGridEnv:
    """The adapter for `xminigrid/<id>`; ImportError naming the extra when XLand-MiniGrid
    is missing, KeyError for an id it does not know."""
    try:
        import xminigrid
    except ImportError:
        raise ImportError(f"{env_id!r} needs XLand-MiniGrid: pip install 'podracer[{EXTRA}]'") from None
    name = env_id[len(PREFIX):]
    if name not in xminigrid.registered_environments():
        raise KeyError(name)
    return XMiniGridEnv(name)
