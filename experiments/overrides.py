"""Tyro-style command-line overrides of a config tree: `--agent.learning-rate 1e-3`.

Each `--section.field VALUE` replaces one field; dashes stand for underscores. Values are
parsed by the field's annotated type; tuples take several values or a comma list
(`--arch.devices 0 1` or `--arch.devices 0,1`); a bool may stand alone (`--log.console`
means true). The config is rebuilt with `dataclasses.replace`, so every section's own
validation runs again. Unknown fields and bad values raise `OverrideError`, naming them.

An option alias (`register_option_alias`) keeps a command line working after a field became
an option of a `name=value` tuple field: `--agent.prefix-channels 16` sets `channels=16` in
`agent.torso_options`, merged with the entries it already holds.
"""

from __future__ import annotations

import dataclasses
import difflib
import numbers
import os
import types
import typing
from typing import Any

import numpy as np

from podracer.config import ConfigError
from podracer.plugins import load_plugins


class OverrideError(ConfigError):
    """A command-line override that names no field or holds a value of the wrong type."""


# Option aliases: a dotted path -> (the `name=value` tuple field it sets, the option's name).
_OPTION_ALIASES: dict[str, tuple[str, str]] = {}


def register_option_alias(path: str, target: str, option: str) -> None:
    """Make `--<path> VALUE` set the entry `option=VALUE` of the `name=value` tuple field
    `target` (replacing an entry of that name, keeping the others).

    Args:
        path: the alias's dotted path, e.g. "agent.prefix_channels".
        target: the tuple field's dotted path, e.g. "agent.torso_options".
        option: the entry's name, e.g. "channels".
    """
    _OPTION_ALIASES[path] = (target, option)


def option_aliases() -> dict[str, tuple[str, str]]:
    """The registered option aliases (plugins loaded first).

    Returns:
        Alias path -> (target field, option name).
    """
    load_plugins()
    return dict(_OPTION_ALIASES)


def _value_at(config: Any, path: str) -> Any:
    for name in path.split("."):
        config = getattr(config, name)
    return config


def _set_option(entries: tuple[str, ...], option: str, value: str) -> tuple[str, ...]:
    kept = tuple(entry for entry in entries if entry.partition("=")[0].strip() != option)
    return kept + (f"{option}={value}",)


def field_paths(config: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf field of a config tree: dotted path -> annotated type."""
    hints = typing.get_type_hints(type(config))
    paths: dict[str, Any] = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        path = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value):
            paths.update(field_paths(value, path + "."))
        else:
            paths[path] = hints[field.name]
    return paths


def split_overrides(args: list[str]) -> list[tuple[str, list[str]]]:
    """`["--a.b", "1", "--c=2", "--d"]` -> `[("a.b", ["1"]), ("c", ["2"]), ("d", [])]`."""
    pairs: list[tuple[str, list[str]]] = []
    for arg in args:
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            pairs.append((name.replace("-", "_"), [value] if eq else []))
        elif pairs:
            pairs[-1][1].append(arg)
        else:
            raise OverrideError(f"unexpected argument {arg!r}; overrides look like --agent.learning-rate 1e-3")
    return pairs


def apply_overrides(config: Any, args: list[str]) -> Any:
    """Return `config` with the command-line overrides in `args` applied (a field given twice:
    the last value). Each section is rebuilt once with all of its new values, so fields that
    are only valid together (`--agent.latent-size 32 --agent.shared-torso true`) may come in
    any order."""
    paths = field_paths(config)
    aliases = option_aliases()
    changes: dict[str, Any] = {}
    aliased: list[tuple[str, list[str]]] = []
    for path, values in split_overrides(args):
        if path in aliases and path not in paths:
            aliased.append((path, values))
            continue
        if path not in paths:
            close = closest_path(path, list(paths))
            hint = f"; did you mean --{close.replace('_', '-')}?" if close else ""
            raise OverrideError(f"unknown field {path!r}{hint}")
        changes[path] = parse_value(path, paths[path], values)
    for path, values in aliased:  # after the fields, so that they merge into the field's new value
        target, option = aliases[path]
        if target not in paths or len(values) != 1:
            raise OverrideError(f"--{path.replace('_', '-')} takes one value (it sets {option}= in "
                                f"--{target.replace('_', '-')})")
        current = changes[target] if target in changes else _value_at(config, target)
        changes[target] = _set_option(tuple(current), option, values[0])
    return _replace(config, changes)


def closest_name(name: str, names: list[str]) -> str | None:
    """The field of `names` that `name` most likely misspells (difflib), or abbreviates by
    its initials (`lr` for `learning_rate`); None if none is close."""
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        return close[0]
    initials = [field for field in names if len(name) > 1 and "".join(w[:1] for w in field.split("_")) == name]
    return initials[0] if initials else None


def closest_path(path: str, paths: list[str]) -> str | None:
    """The dotted field path that `path` most likely means: a field of the same section
    first (`agent.lr` is `agent.learning_rate`, not `agent.core`, which shares more letters
    of the whole path), else any path (`agnet.learning_rate`, or `learning_rate` without
    its section)."""
    section, _, leaf = path.rpartition(".")
    leaves = {p.rpartition(".")[2]: p for p in paths if p.rpartition(".")[0] == section}
    close = closest_name(leaf, list(leaves)) if leaves else None
    if close is not None:
        return leaves[close]
    close = difflib.get_close_matches(path, paths, n=1)
    return close[0] if close else None


def _replace(config: Any, changes: dict[str, Any], prefix: str = "") -> Any:
    """`config` with the fields of `changes` (dotted path -> value) under `prefix` replaced,
    each section rebuilt (and validated) once."""
    updates: dict[str, Any] = {}
    for field in dataclasses.fields(config):
        path = prefix + field.name
        if path in changes:
            updates[field.name] = changes[path]
        elif any(name.startswith(path + ".") for name in changes):
            updates[field.name] = _replace(getattr(config, field.name), changes, path + ".")
    return dataclasses.replace(config, **updates) if updates else config


def parse_value(path: str, annotation: Any, values: list[str]) -> Any:
    """Parse the strings given for one field according to its annotation."""
    origin = typing.get_origin(annotation)
    if origin is tuple:
        item_type = typing.get_args(annotation)[0]
        items = [part for value in values for part in value.split(",") if part]
        return tuple(parse_value(path, item_type, [item]) for item in items)
    if annotation is bool:
        if not values:
            return True
        return _parse_scalar(path, bool, _single(path, values))
    value = _single(path, values)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if type(None) in options and value.lower() in ("none", "null"):
            return None
        for option in options:
            if option is not type(None):
                try:
                    return parse_value(path, option, [value])
                except OverrideError:
                    continue
        raise OverrideError(f"{path} expects {_type_name(annotation)}, got {value!r}")
    if origin is typing.Literal:
        choices = typing.get_args(annotation)
        if value not in choices:
            raise OverrideError(f"{path} must be one of {', '.join(map(str, choices))}; got {value!r}")
        return value
    return _parse_scalar(path, annotation, value)


def _single(path: str, values: list[str]) -> str:
    if len(values) != 1:
        raise OverrideError(f"--{path.replace('_', '-')} takes one value, got {len(values)}")
    return values[0]


def _parse_scalar(path: str, annotation: Any, value: str) -> Any:
    try:
        if annotation is bool:
            lowered = value.lower()
            if lowered in ("true", "1", "yes", "on"):
                return True
            if lowered in ("false", "0", "no", "off"):
                return False
            raise ValueError(value)
        if annotation is int:
            return int(float(value)) if _is_integral_float(value) else int(value)
        if annotation in (float, str):
            return annotation(value)
    except ValueError:
        raise OverrideError(f"{path} expects {_type_name(annotation)}, got {value!r}") from None
    raise OverrideError(f"{path} has a type ({_type_name(annotation)}) that cannot be set from the command line")


def _is_integral_float(value: str) -> bool:
    """Accept `5e5` for an int field, but not `0.5`."""
    try:
        number = float(value)
    except ValueError:
        return False
    return "e" in value.lower() and number.is_integer()


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", str(annotation))


def override(config: Any, **changes: Any) -> Any:
    """`config` with fields replaced from Python: top-level fields by value, sections by a
    dict of their fields (`override(c, seed=3, agent=dict(learning_rate=1e-3))`).

    The Python twin of `apply_overrides`: unknown fields raise `OverrideError` naming them
    (with the closest match), a section takes a dict or a whole config section (another
    algorithm's config, say), and every rebuilt section validates itself again.
    """
    updates: dict[str, Any] = {}
    names = {field.name for field in dataclasses.fields(config)}
    hints = typing.get_type_hints(type(config))
    for name, value in changes.items():
        if name not in names:
            close = closest_name(name, sorted(names))
            hint = f"; did you mean {close}?" if close else ""
            raise OverrideError(f"unknown field {name!r} in {type(config).__name__}{hint}")
        current = getattr(config, name)
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            try:
                value = override(current, **value)
            except OverrideError as error:
                raise OverrideError(f"{name}: {error}") from None
        elif dataclasses.is_dataclass(current) and not dataclasses.is_dataclass(value):
            raise OverrideError(f"{name} expects a dict of its fields ({name}=dict(...)) or a config section "
                                f"such as {type(current).__name__}(...), got {value!r}")
        elif not dataclasses.is_dataclass(current):
            value = coerce_value(name, hints[name], value)
        updates[name] = value
    return dataclasses.replace(config, **updates)


def coerce_value(path: str, annotation: Any, value: Any) -> Any:
    """A Python value for one field, checked against its annotation as the command line
    parses strings: an int field takes an integral number (`2e4`, a NumPy integer), a float
    field any real number, a str field a str or a path, a tuple field a list, tuple or 1-D
    array; OverrideError (naming `path`) otherwise."""
    origin = typing.get_origin(annotation)
    real = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    if origin is tuple and isinstance(value, (list, tuple, np.ndarray)):
        item_type = typing.get_args(annotation)[0]
        return tuple(coerce_value(path, item_type, item) for item in value)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(annotation):
            return None
        for option in typing.get_args(annotation):
            if option is not type(None):
                try:
                    return coerce_value(path, option, value)
                except OverrideError:
                    continue
    elif annotation is bool and isinstance(value, bool):
        return value
    elif annotation is int and real and float(value).is_integer():
        return int(value)
    elif annotation is float and real:
        return float(value)
    elif annotation is str and isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    elif annotation not in (bool, int, float, str) and origin is not tuple:
        return value  # a Literal, or a type the command line cannot set: left to the section's validation
    raise OverrideError(f"{path} expects {_type_name(annotation)}, got {value!r}")
