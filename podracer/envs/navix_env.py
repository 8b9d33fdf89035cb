"""navix environments (`pip install 'podracer[navix]'`) as podracer `JaxEnv`s: `navix/<id>`.

An id is `navix/` and one of navix's registered ids (`navix/Navix-Empty-5x5-v0`,
`navix/Navix-DoorKey-5x5-v0`, ...: `navix.registry()`). The adapter steps navix's
non-resetting transition (`Environment._step`; navix's `step` resets by itself): navix's
termination (`step_type == TERMINATION`) is `terminated`, and its time limit
(`max_steps`) truncates as every `JaxEnv`'s. The parameters are the navix environment
object itself (all its fields are static), so `--env.params max_steps=50` sets its fields.
Observations are navix's (the default: a symbolic `uint8 [H, W, 3]` grid); frames for
videos are navix's `rgb` view of the whole grid. Checked with navix 0.7.4 and jax 0.10.2.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from podracer.envs.base import JaxEnv
from podracer.envs.wrappers import observation_spec_of
from podracer.types import Array, DiscreteSpec, ObservationSpec, PRNGKey

PREFIX = "navix/"
EXTRA = "navix"
# navix is the optional extra `EXTRA`: imported where used, so this module imports without it.
_TERMINATION = 2  # navix's StepType.TERMINATION


def suite_ids() -> tuple[str, ...]:
    """`navix/<id>` for every id of navix's registry; empty when navix is not installed."""
    try:
        import navix
    except ImportError:
        return ()
    return tuple(PREFIX + name for name in sorted(navix.registry()))


class NavixEnv(JaxEnv):
    """A navix environment by its registered id, `NavixEnv("Navix-Empty-5x5-v0")`."""

    render_fps = 4

    def __init__(self, name: str, **kwargs: Any) -> None:
        import navix

        self.name = PREFIX + name
        self._env = navix.make(name, **kwargs)

    @property
    def default_params(self) -> Any:
        return self._env

    def replace_params(self, params: Any) -> None:
        """Use `params` (a navix environment object) from now on (`podracer.envs.params`)."""
        self._env = params

    def reset_env(self, key: PRNGKey, params: Any) -> tuple[Any, Array]:
        timestep = params.reset(key)
        return timestep, timestep.observation

    def step_env(self, key: PRNGKey, state: Any, action: Array, params: Any) -> tuple[Any, Array, Array, Array]:
        timestep = params._step(state, action)
        return timestep, timestep.observation, timestep.reward, timestep.step_type == _TERMINATION

    def max_episode_steps(self, params: Any) -> int:
        return params.max_steps

    def observation_spec(self, params: Any) -> ObservationSpec:
        return observation_spec_of(lambda key: self.reset_env(key, params)[1])

    def action_spec(self, params: Any) -> DiscreteSpec:
        return DiscreteSpec(len(self._env.action_set))

    def render(self, state: Any) -> Array:
        """The whole grid as navix draws it, `uint8 [H * 8, W * 8, 3]` (8-pixel tiles)."""
        import navix

        return jnp.asarray(navix.observations.rgb(state.state), jnp.uint8)


def make_suite_env(env_id: str) -> NavixEnv:
    """The adapter for `navix/<id>`; ImportError naming the extra when navix is missing,
    KeyError for an id navix does not know."""
    try:
        import navix
    except ImportError:
        raise ImportError(f"{env_id!r} needs navix: pip install 'podracer[{EXTRA}]'") from None
    name = env_id[len(PREFIX):]
    if name not in navix.registry():
        raise KeyError(name)
    return NavixEnv(name)
