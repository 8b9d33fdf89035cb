"""Network torsos registered by name, with their options: what a config's `agent.torso` may
name beyond the built-in ones (`BUILTIN_TORSOS`).

A registered torso carries a frozen dataclass of its options; a config sets them as
`name=value` entries (`DQNConfig.torso_options = ("blocks=2", "channels=16")`, on the command
line `--agent.torso-options blocks=2 channels=16`), each converted to the type of its field
and validated by the dataclass. Agents that accept registered torsos (DQN) build them with
`make_registered`: a torso whose `outputs` is "features" gets the agent's head on top, one
whose `outputs` is "action_values" is the whole network (one value per action).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, Callable, Literal

import flax.linen as nn

from podracer.config import ConfigError
from podracer.plugins import load_plugins
from podracer.types import ActionSpec, ObservationSpec

TorsoOutputs = Literal["features", "action_values"]

# The torsos every agent builds itself (`podracer.agents.networks.make_torso`).
BUILTIN_TORSOS = ("mlp", "nature_cnn", "impala_cnn", "minatar_cnn", "multi_encoder")


@dataclasses.dataclass(frozen=True)
class Torso:
    """A registered torso.

    name:        what `agent.torso` names.
    options:     a frozen dataclass of its options, every field with a default; its
                 `__post_init__` raises ValueError for a bad value.
    make:        `(options, obs_spec, action_spec) -> flax module`; raises ConfigError naming
                 `agent.torso` for observations or actions it cannot serve.
    outputs:     "features" (the agent adds its head) or "action_values" (`[B, num_actions]`).
    description: one line for `podracer list`.
    """

    name: str
    options: type
    make: Callable[[Any, ObservationSpec, ActionSpec], nn.Module]
    outputs: TorsoOutputs = "features"
    description: str = ""


_TORSOS: dict[str, Torso] = {}


def register_torso(name: str, options: type, make: Callable[[Any, ObservationSpec, ActionSpec], nn.Module],
                   outputs: TorsoOutputs = "features", description: str = "", overwrite: bool = False) -> Torso:
    """Make `agent.torso = name` build `make(options, obs_spec, action_spec)` in the agents
    that accept registered torsos.

    Args:
        name: the torso's name (not a built-in one).
        options: a frozen dataclass of its options, each field with a default.
        make: the module's factory (see `Torso.make`).
        outputs: "features" or "action_values" (see `Torso.outputs`).
        description: one line for `podracer list`.
        overwrite: replace a torso registered under the same name.

    Returns:
        The registered torso.

    Raises:
        ValueError: the name is built-in or taken, or `options` is not a dataclass whose
            fields all have defaults.
    """
    if name in BUILTIN_TORSOS:
        raise ValueError(f"torso {name!r} is built-in; choose another name")
    if name in _TORSOS and not overwrite:
        raise ValueError(f"torso {name!r} is already registered; pass overwrite=True to replace it")
    if outputs not in typing.get_args(TorsoOutputs):
        raise ValueError(f"torso {name!r}: outputs must be one of {typing.get_args(TorsoOutputs)}, got {outputs!r}")
    if not dataclasses.is_dataclass(options) or any(
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            for f in dataclasses.fields(options)):
        raise ValueError(f"torso {name!r}: options must be a dataclass whose fields all have defaults")
    torso = Torso(name, options, make, outputs, description)
    _TORSOS[name] = torso
    return torso


def registered_torsos() -> dict[str, Torso]:
    """Every registered torso by name (plugins loaded first).

    Returns:
        The torsos, in the order registered.
    """
    load_plugins()
    return dict(_TORSOS)


def _convert(text: str, kind: Any, where: str) -> Any:
    if kind is bool:
        if text.lower() not in ("true", "false", "1", "0"):
            raise ConfigError(f"{where} must be true or false, got {text!r}")
        return text.lower() in ("true", "1")
    if kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            raise ConfigError(f"{where} must be {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if kind is float and not math.isfinite(value):
            raise ConfigError(f"{where} must be a finite number, got {text!r}")
        return value
    return text


def parse_torso_options(torso: Torso, entries: tuple[str, ...], field: str = "agent.torso_options") -> Any:
    """The options dataclass of `torso` with the `name=value` entries set.

    Args:
        torso: a registered torso.
        entries: `("blocks=2", "channels=16")`; names are the options' fields.
        field: the config field the entries come from, named in errors.

    Returns:
        An instance of `torso.options`.

    Raises:
        ConfigError: naming `field` for a malformed entry, an unknown name, a value of the
            wrong type or one the options refuse.
    """
    hints = typing.get_type_hints(torso.options)
    names = [f.name for f in dataclasses.fields(torso.options)]
    values: dict[str, Any] = {}
    for entry in entries:
        name, sep, text = entry.partition("=")
        name, text = name.strip(), text.strip()
        if not sep or not name or not text:
            raise ConfigError(f"{field} entries are name=value, got {entry!r}")
        if name not in names:
            raise ConfigError(f"{field}: torso {torso.name!r} has no option {name!r}; it has {', '.join(names)}")
        values[name] = _convert(text, hints[name], f"{field}: {name}")
    try:
        return torso.options(**values)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{field}: {error}") from None


def make_registered(name: str, entries: tuple[str, ...], obs_spec: ObservationSpec,
                    action_spec: ActionSpec) -> tuple[nn.Module, TorsoOutputs]:
    """Build the registered torso `name` with its options.

    Args:
        name: a registered torso's name.
        entries: its options as `name=value` entries.
        obs_spec: the observations it will see.
        action_spec: the actions of the agent it serves.

    Returns:
        `(module, outputs)`: the fresh module and what it outputs.

    Raises:
        ConfigError: naming `agent.torso` for an unknown name, or from the options or factory.
    """
    torso = registered_torsos().get(name)
    if torso is None:
        raise ConfigError(f"agent.torso: unknown torso {name!r}")
    return torso.make(parse_torso_options(torso, entries), obs_spec, action_spec), torso.outputs
