"""Craftax environments (`pip install 'podracer[craftax]'`) as podracer `JaxEnv`s: `craftax/<id>`.

An id is `craftax/` and one of Craftax's names (`CRAFTAX_NAMES`: `craftax/Craftax-Classic-
Symbolic-v1`, ...), built without Craftax's auto-reset and wrapped by
`podracer.envs.wrappers.GymnaxAPIEnv`. Craftax's `done` includes its time limit
(`params.max_timesteps`, 10000 steps): a `done` at the limit is reported as a truncation,
any other (the player died) as a termination. The parameters are Craftax's `EnvParams`
(`--env.params max_timesteps=1000`). A reset generates a world, which costs far more than a
step: on CPU, `podracer.envs.base.step_batch` computes a batch's resets only when one of
its episodes ended. Videos draw Craftax-Classic (`CraftaxClassicEnv.render`); full Craftax
has no renderer here. Checked with craftax 1.6.1 and jax 0.10.2.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from podracer.envs.wrappers import GymnaxAPIEnv, WrappedState
from podracer.types import Array

PREFIX = "craftax/"
EXTRA = "craftax"
# Craftax is the optional extra `EXTRA`: imported where used, so this module imports without it.
CRAFTAX_NAMES = ("Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1", "Craftax-Symbolic-v1",
                 "Craftax-Pixels-v1")


def suite_ids() -> tuple[str, ...]:
    """`craftax/<name>` for `CRAFTAX_NAMES`; empty when Craftax is not installed."""
    try:
        import craftax.craftax_env  # noqa: F401 - only whether it imports
    except ImportError:
        return ()
    return tuple(PREFIX + name for name in CRAFTAX_NAMES)


def _at_time_limit(env_state: Any, info: dict, params: Any) -> Array:
    return env_state.timestep >= params.max_timesteps


class CraftaxEnv(GymnaxAPIEnv):
    """A Craftax environment by name, `CraftaxEnv("Craftax-Classic-Symbolic-v1")`."""

    def __init__(self, name: str) -> None:
        from craftax.craftax_env import make_craftax_env_from_name

        env = make_craftax_env_from_name(name, auto_reset=False)
        super().__init__(env, max_episode_steps=int(env.default_params.max_timesteps),
                         truncation=_at_time_limit, name=PREFIX + name)

    def max_episode_steps(self, params: Any) -> int:
        """Craftax's own time limit, `params.max_timesteps`."""
        return params.max_timesteps


class CraftaxClassicEnv(CraftaxEnv):
    """A Craftax-Classic environment, drawn for videos with Craftax's pixel renderer."""

    render_fps = 8

    def __init__(self, name: str) -> None:
        from craftax.craftax_classic.constants import BLOCK_PIXEL_SIZE_AGENT
        from craftax.craftax_classic.renderer import make_craftax_pixel_renderer

        super().__init__(name)
        self._render_pixels = make_craftax_pixel_renderer(BLOCK_PIXEL_SIZE_AGENT)

    def render(self, state: WrappedState) -> Array:
        """The player's view as Craftax-Classic-Pixels shows it, `uint8 [63, 63, 3]`."""
        return jnp.clip(self._render_pixels(state.env_state), 0, 255).astype(jnp.uint8)


def make_suite_env(env_id: str) -> CraftaxEnv:
    """The adapter for `craftax/<name>`; ImportError naming the extra when Craftax is
    missing, KeyError for a name it does not know."""
    try:
        import craftax.craftax_env  # noqa: F401 - only whether it imports
    except ImportError:
        raise ImportError(f"{env_id!r} needs Craftax: pip install 'podracer[{EXTRA}]'") from None
    name = env_id[len(PREFIX):]
    if name not in CRAFTAX_NAMES:
        raise KeyError(name)
    return (CraftaxClassicEnv if name.startswith("Craftax-Classic") else CraftaxEnv)(name)
