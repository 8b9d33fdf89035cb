"""Environment parameters set by name: `EnvConfig.params = ("memory_length=10",)`
(`--env.params memory_length=10` on the command line) replaces fields of a JAX environment's
parameters, e.g. gymnax's `EnvParams` (MemoryChain-bsuite's memory length, a time limit
`max_steps_in_episode`). Values are converted to the type of the field they replace.
`EnvConfig.max_episode_steps`, where set, is the time limit that truncates episodes whatever
the parameters say (an environment may still read its own limit, e.g. in its observation)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from podracer.config import ConfigError
from podracer.envs.base import JaxEnv, example_action


def parse_params(params: tuple[str, ...]) -> dict[str, str]:
    """`("a=1", "b=x")` -> `{"a": "1", "b": "x"}`; ConfigError naming `env.params` otherwise."""
    parsed = {}
    for item in params:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise ConfigError(f"env.params entries are name=value, got {item!r}")
        parsed[name.strip()] = value.strip()
    return parsed


def with_params(env: JaxEnv, params: tuple[str, ...], env_id: str) -> JaxEnv:
    """`env` with the named fields of its parameters replaced (`replace_params`); ConfigError
    naming `env.params` for an environment without named parameters or an unknown field."""
    changes = parse_params(params)
    current = env.default_params
    replace = getattr(env, "replace_params", None)
    if replace is None or not dataclasses.is_dataclass(current):
        raise ConfigError(f"env.params: {env_id} has no named parameters to set")
    fields = {f.name for f in dataclasses.fields(current)}
    unknown = sorted(set(changes) - fields)
    if unknown:
        raise ConfigError(f"env.params: {env_id} has no parameter {', '.join(unknown)}; "
                          f"it has {', '.join(sorted(fields))}")
    replace(current.replace(**{name: _convert(getattr(current, name), value, name) for name, value in changes.items()}))
    return env


def check_finite_start(env: JaxEnv, params: tuple[str, ...], env_id: str) -> None:
    """ConfigError naming `env.params` if the environment with these parameters returns a
    non-finite observation or reward on its first reset or step (gymnax does not validate
    its parameters: MemoryChain's `memory_length=0` divides by zero in every observation).
    Under Anakin such values would otherwise surface as a non-finite *loss*, blaming the
    agent; Sebulba's actors name the environment (`sebulba.actor.check_env_finite`)."""
    env_params = env.default_params
    spec = example_action(env.action_spec(env_params))
    action = jnp.zeros(spec.shape, spec.dtype)

    def first(key):
        state, obs = env.reset(key, env_params)
        _, step = env.step(key, state, action, env_params)
        return obs, step.obs, step.reward

    outputs = jax.jit(first)(jax.random.key(0))
    for what, value in zip(("observation on reset", "observation after a step", "reward"), outputs):
        if not all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree.leaves(value)
                   if np.issubdtype(np.asarray(leaf).dtype, np.floating)):
            raise ConfigError(f"env.params: {env_id} with {', '.join(params)} returns a non-finite {what}")


def _convert(old: Any, value: str, name: str) -> Any:
    kind = type(old.item()) if hasattr(old, "item") and getattr(old, "shape", None) == () else type(old)
    try:
        if kind is bool:
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(value)
            return value.lower() in ("true", "1")
        number = float(value)
        converted = kind(value) if kind in (int, float) else type(old)(number)
    except (TypeError, ValueError):
        raise ConfigError(f"env.params: {name} must be {kind.__name__}, got {value!r}") from None
    if not math.isfinite(number):  # as every number of a Config (`check_finite_floats`)
        raise ConfigError(f"env.params: {name} must be finite, got {value!r}")
    return converted
