"""Plugins: installed packages that register environments, networks, algorithms, presets and
commands, found through the `podracer.plugins` entry-point group (as pytest finds its plugins).

A package declares, in its own metadata,

    [project.entry-points."podracer.plugins"]
    my_envs = "my_package.podracer_plugin"            # a module: importing it registers
    my_algos = "my_package.plugin:register"           # a callable: called with no arguments

and every registry of podracer (`podracer.envs`, `podracer.envs.host`, `podracer.networks.registry`,
`podracer.agents.registry`, the presets and commands of `experiments`) loads the plugins
once, before it is first read: the command line, each process of `launch-local` and the
Python API (`experiments.train.train`, `podracer.presets.get`) all see the same
registrations. A plugin must not start JAX's backends when it loads (no arrays at import):
the command line sets the number of CPU devices after loading them.

`$PODRACER_IMPORT` (comma-separated module names, importable from the current directory or
PYTHONPATH) names local modules the command line imports the same way (`import_modules`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys

from podracer.config import ConfigError

PLUGIN_GROUP = "podracer.plugins"
IMPORT_ENV = "PODRACER_IMPORT"  # local modules the command line imports first

_loaded: list[str] | None = None  # the entry points loaded, once loading has finished
_loading = False  # a registry read by a plugin while it loads sees what is registered so far


class PluginError(ConfigError):
    """A plugin (an entry point of `podracer.plugins`, or a `$PODRACER_IMPORT` module) failed
    to load; the one-line message names it and what it raised."""


def _one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".replace("\n", " ")


def load_plugins() -> list[str]:
    """Load every entry point of the `podracer.plugins` group, once per process.

    An entry point names a module (imported: its import registers things) or a callable
    (`module:function`, called with no arguments). Registries call this before they are
    read; calling it again does nothing.

    Returns:
        The names of the entry points loaded, in the order loaded (sorted by name).

    Raises:
        PluginError: naming the entry point that failed to load and what it raised; the next
            call tries again.
    """
    global _loaded, _loading
    if _loaded is not None or _loading:
        return list(_loaded or [])
    _loading = True
    try:
        names = []
        for entry_point in sorted(importlib.metadata.entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
            try:
                target = entry_point.load()
                if callable(target):
                    target()
            except Exception as error:  # noqa: BLE001 - whatever the plugin raised, named
                raise PluginError(f"plugin {entry_point.name!r} ({PLUGIN_GROUP} entry point {entry_point.value}) "
                                  f"failed to load: {_one_line(error)}") from error
            names.append(entry_point.name)
        _loaded = names
    finally:
        _loading = False
    return list(names)


def import_modules(names: list[str]) -> None:
    """Import local modules by name (the command line's `$PODRACER_IMPORT`), so that what
    they register exists; the current directory is searched first, as `python -m` would.

    Args:
        names: module names, e.g. `["my_envs", "lab.presets"]`.

    Raises:
        PluginError: naming the module that failed to import and what it raised.
    """
    if names and "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # `python -m` would have; the console script does not
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - whatever the user's module raised, named
            raise PluginError(f"{IMPORT_ENV}: cannot import {name!r}: {_one_line(error)}") from error


def modules_to_import() -> list[str]:
    """The module names `$PODRACER_IMPORT` lists (comma-separated; empty entries dropped).

    Returns:
        The names, in order.
    """
    return [name.strip() for name in os.environ.get(IMPORT_ENV, "").split(",") if name.strip()]
