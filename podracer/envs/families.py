"""Families of environment ids: a pattern of ids (`MyGrid-<size>`, `Maze-<w>x<h>-hard`) that
one factory builds, for ids too many to list one by one.

A family is registered in its JAX form (Anakin, and Sebulba through `--env.backend jax`)
with `register_jax_env_family`, and in its host form (Sebulba) with
`register_host_env_family`; `podracer.envs.make_jax_env` and `podracer.envs.host` resolve ids
through them after the ids registered one by one. A family's factory also receives the
config's `env.params` (`name=value` entries), which it reads as its own options.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any, Callable, Union

from podracer.plugins import load_plugins

if TYPE_CHECKING:
    from podracer.envs.base import JaxEnv
    from podracer.envs.host import HostEnv
    from podracer.types import ActionSpec, ObservationSpec

IdPattern = Union[str, "re.Pattern[str]", Callable[[str], bool]]


def _matcher(pattern: IdPattern) -> Callable[[str], bool]:
    if callable(pattern) and not isinstance(pattern, re.Pattern):
        return pattern
    compiled = re.compile(pattern)
    return lambda env_id: compiled.fullmatch(env_id) is not None


@dataclasses.dataclass(frozen=True)
class JaxEnvFamily:
    """The JAX form of a family of ids.

    name:     what `podracer list` shows for it, e.g. "MyGrid-<size>".
    matches:  whether an id belongs to the family (no other registry may take it).
    make:     `(env_id, params) -> JaxEnv`, `params` being `env.params` (empty when the
              config sets none); raises ValueError for an id or option it cannot build
              (shown as an unknown environment, or an error naming `env.params`), or
              returns None for an id it does not build after all.
    examples: ids listed with the built-in ones.
    """

    name: str
    matches: Callable[[str], bool]
    make: Callable[[str, tuple[str, ...]], JaxEnv | None]
    examples: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class HostEnvFamily:
    """The host form of a family of ids (Sebulba), chosen whatever `env.backend` says.

    name:        the backend name `podracer.envs.host.host_backend` reports for its ids.
    matches:     whether an id belongs to the family.
    make:        `(env_id, num_envs, seed, max_episode_steps, params) -> HostEnv`.
    specs:       `(env_id, max_episode_steps, params) -> (observation_spec, action_spec)`,
                 without building a batch; raises ConfigError for a bad option.
    examples:    ids listed among the host ids.
    description: one line for `podracer list`.
    record:      `env_id -> dict | None`: what an environment's rewards depend on beyond its
                 config (a toolchain's versions), written to `RUN_DIR/environment.json` and
                 checked on resume; None when nothing does.
    """

    name: str
    matches: Callable[[str], bool]
    make: Callable[[str, int, int, int | None, tuple[str, ...]], HostEnv]
    specs: Callable[[str, int | None, tuple[str, ...]], tuple[ObservationSpec, ActionSpec]]
    examples: tuple[str, ...] = ()
    description: str = ""
    record: Callable[[str], dict[str, Any] | None] | None = None


_JAX_FAMILIES: dict[str, JaxEnvFamily] = {}
_HOST_FAMILIES: dict[str, HostEnvFamily] = {}


def register_jax_env_family(name: str, pattern: IdPattern, make: Callable[[str, tuple[str, ...]], Any],
                            examples: tuple[str, ...] = (), overwrite: bool = False) -> JaxEnvFamily:
    """Make `make_jax_env` build the ids that `pattern` matches with `make(env_id, params)`.

    Args:
        name: the family's name as `podracer list` shows it, e.g. "MyGrid-<size>".
        pattern: a regular expression an id must match whole, or a predicate on ids.
        make: `(env_id, params) -> JaxEnv` (see `JaxEnvFamily.make`).
        examples: ids listed by `podracer.envs.jax_env_ids`.
        overwrite: replace a family registered under the same name.

    Returns:
        The registered family.

    Raises:
        ValueError: `name` is taken and `overwrite` is not set.
    """
    if name in _JAX_FAMILIES and not overwrite:
        raise ValueError(f"environment family {name!r} is already registered; pass overwrite=True to replace it")
    family = JaxEnvFamily(name, _matcher(pattern), make, tuple(examples))
    _JAX_FAMILIES[name] = family
    return family


def register_host_env_family(name: str, pattern: IdPattern, make: Callable[..., Any], specs: Callable[..., Any],
                             examples: tuple[str, ...] = (), description: str = "",
                             record: Callable[[str], dict[str, Any] | None] | None = None,
                             overwrite: bool = False) -> HostEnvFamily:
    """Make Sebulba's host environments (`podracer.envs.host.make_host_env`) build the ids
    that `pattern` matches with `make`, whatever `env.backend` says.

    Args:
        name: the backend name reported for these ids (`host_backend`).
        pattern: a regular expression an id must match whole, or a predicate on ids.
        make: `(env_id, num_envs, seed, max_episode_steps, params) -> HostEnv`.
        specs: `(env_id, max_episode_steps, params) -> (observation_spec, action_spec)`.
        examples: ids listed by `podracer.envs.host.host_env_ids`.
        description: one line for `podracer list`.
        record: `env_id -> dict | None`, what the rewards depend on beyond the config
            (recorded in the run directory and checked on resume); None for nothing.
        overwrite: replace a family registered under the same name.

    Returns:
        The registered family.

    Raises:
        ValueError: `name` is taken (or is a built-in backend) and `overwrite` is not set.
    """
    if name in ("auto", "envpool", "gymnasium", "jax"):
        raise ValueError(f"{name!r} is a built-in host backend; choose another family name")
    if name in _HOST_FAMILIES and not overwrite:
        raise ValueError(f"host environment family {name!r} is already registered; pass overwrite=True to replace it")
    family = HostEnvFamily(name, _matcher(pattern), make, specs, tuple(examples), description, record)
    _HOST_FAMILIES[name] = family
    return family


def jax_env_families() -> list[JaxEnvFamily]:
    """Every JAX-form family, in the order registered (plugins loaded first).

    Returns:
        The families.
    """
    load_plugins()
    return list(_JAX_FAMILIES.values())


def host_env_families() -> list[HostEnvFamily]:
    """Every host-form family, in the order registered (plugins loaded first).

    Returns:
        The families.
    """
    load_plugins()
    return list(_HOST_FAMILIES.values())


def jax_family_of(env_id: str) -> JaxEnvFamily | None:
    """The JAX-form family an id belongs to, or None.

    Args:
        env_id: an environment id.

    Returns:
        The first registered family that matches it, or None.
    """
    return next((family for family in jax_env_families() if family.matches(env_id)), None)


def host_family_of(env_id: str) -> HostEnvFamily | None:
    """The host-form family an id belongs to, or None.

    Args:
        env_id: an environment id.

    Returns:
        The first registered family that matches it, or None.
    """
    return next((family for family in host_env_families() if family.matches(env_id)), None)
