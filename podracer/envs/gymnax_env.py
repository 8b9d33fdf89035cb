"""Adapter from gymnax 1.0 environments to the podracer `JaxEnv` protocol."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from podracer.envs.base import JaxEnv
from podracer.envs.render import cartpole_frame
from podracer.types import ActionSpec, DiscreteSpec, ObsSpec, box_spec

# gymnax is imported where an environment is made, not here: `import podracer` imports this
# module, and gymnax takes about 1.8 s to import (it pulls in matplotlib).

GYMNAX_IDS = (
    "CartPole-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "Pendulum-v1",  # continuous actions (BoxSpec)
    "MountainCarContinuous-v0",  # continuous actions (BoxSpec)
    "Asterix-MinAtar",
    "Breakout-MinAtar",
    "Freeway-MinAtar",
    "SpaceInvaders-MinAtar",
    "Catch-bsuite",
    "DeepSea-bsuite",
    "MemoryChain-bsuite",
    "UmbrellaChain-bsuite",
    "DiscountingChain-bsuite",
    "FourRooms-misc",
)


class GymnaxEnv(JaxEnv):
    """A gymnax environment, e.g. `GymnaxEnv("CartPole-v1")`; its action spec is a
    `DiscreteSpec` or, for a continuous action space (`Pendulum-v1`), a `BoxSpec`.

    Its params are gymnax's own, unchanged: some environments read them in their
    observations (DiscountingChain-bsuite shows `time / max_steps_in_episode`). gymnax 1.0's
    `step_env` reports natural termination only, and its time limit, `max_steps_in_episode`
    steps, is the one `JaxEnv.step` applies as truncation: the same observations, rewards,
    terminations and truncations as gymnax's own `step`, with the two kept apart.
    """

    def __init__(self, env_id: str, **kwargs: Any):
        import gymnax  # on first use (see the note on imports above)

        self.name = env_id
        self._env, self._params = gymnax.make(env_id, **kwargs)

    @property
    def default_params(self) -> Any:
        return self._params

    def replace_params(self, params: Any) -> None:
        """Use `params` (gymnax's `EnvParams`) from now on (`podracer.envs.params`)."""
        self._params = params

    def reset_env(self, key, params):
        obs, state = self._env.reset_env(key, params)
        return state, obs

    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, _ = self._env.step_env(key, state, action, params)
        return state, obs, reward, terminated

    def max_episode_steps(self, params: Any) -> int:
        """gymnax's time limit (an int for concrete params, an array for traced ones)."""
        return params.max_steps_in_episode

    def observation_spec(self, params: Any) -> ObsSpec:
        """The shape and dtype `reset_env` returns (traced, nothing runs): some gymnax spaces
        declare another dtype than their observations have (Catch-bsuite's space says int32
        for float32 grids, FourRooms-misc's float32 for int32 positions)."""
        obs = jax.eval_shape(lambda key: self.reset_env(key, params)[1], jax.random.key(0))
        return jax.tree.map(lambda leaf: ObsSpec(tuple(leaf.shape), jnp.dtype(leaf.dtype)), obs)

    def action_spec(self, params: Any) -> ActionSpec:
        # The spec is static: the bounds come from the adapter's own (concrete) parameters.
        from gymnax.environments import spaces  # on first use (see the note on imports above)

        space = self._env.action_space(self._params)
        if isinstance(space, spaces.Box):
            return box_spec(space.shape, space.low, space.high)
        return DiscreteSpec(int(self._env.num_actions))


class GymnaxCartPole(GymnaxEnv):
    """gymnax's CartPole-v1, drawn for videos."""

    render_fps = 50

    def __init__(self, env_id: str = "CartPole-v1", **kwargs: Any):
        super().__init__(env_id, **kwargs)

    def render(self, state: Any) -> jax.Array:
        params = self._params
        return cartpole_frame(state.x, state.theta, float(params.x_threshold), float(params.length))


def make_gymnax_env(env_id: str, **kwargs: Any) -> GymnaxEnv:
    """The adapter for a gymnax id, with a renderer where one exists."""
    return {"CartPole-v1": GymnaxCartPole}.get(env_id, GymnaxEnv)(env_id, **kwargs)
