"""Named experiment presets: complete, typed configs that the command line can override."""

from __future__ import annotations

import difflib
from typing import Any, Callable

from experiments.overrides import override
from experiments.presets_dqn import DQN_PRESETS
from experiments.presets_impala import IMPALA_PRESETS
from experiments.presets_muzero import MUZERO_PRESETS
from experiments.presets_ppo import PPO_PRESETS
from experiments.presets_pqn import PQN_PRESETS
from experiments.presets_sac import SAC_PRESETS
from experiments.presets_suites import SUITE_PRESETS
from experiments.presets_td3 import TD3_PRESETS
from podracer.config import Config, ConfigError
from podracer.plugins import load_plugins

# Every preset by name: one `<ALGORITHM>_PRESETS` dict per `experiments/presets_<algorithm>.py`
# module, each holding that algorithm's presets for both architectures (shared pieces in
# `experiments.presets_common`), then those that applications and plugins register
# (`register_preset`; read through `all_presets`, which loads the plugins first). The first
# is the default example (`ppo-cartpole-anakin`).
PRESETS: dict[str, Callable[[], Config]] = {
    **PPO_PRESETS,
    **IMPALA_PRESETS,
    **DQN_PRESETS,
    **PQN_PRESETS,
    **MUZERO_PRESETS,
    **SAC_PRESETS,
    **TD3_PRESETS,
    **SUITE_PRESETS,  # the optional environment suites (navix, XLand-MiniGrid, Jumanji, Craftax)
}


_BUILTIN = frozenset(PRESETS)


def register_preset(name: str, make: Callable[[], Config], overwrite: bool = False) -> None:
    """Add a preset of your own (say, for an environment or algorithm you registered):
    `make()` returns its complete `Config`. The `podracer` command sees it when the module
    that registers it is a plugin (`podracer.plugins`) or is named in `$PODRACER_IMPORT`.
    Built-in names cannot be taken; a name you registered is replaced only with `overwrite`.

    Args:
        name: the preset's name, one word.
        make: `() -> Config`; its docstring is what `podracer list` shows.
        overwrite: replace a preset registered under the same name.

    Raises:
        ValueError: a bad or built-in name, or one taken without `overwrite`.
        TypeError: `make` is not callable.
    """
    if not isinstance(name, str) or not name or name.startswith("-") or any(c.isspace() for c in name):
        raise ValueError(f"a preset name is a non-empty word that does not start with '-', got {name!r}")
    if not callable(make):
        raise TypeError(f"preset {name!r}: make must be callable (() -> Config), got {make!r}")
    if name in _BUILTIN:
        raise ValueError(f"preset {name!r} is built-in; choose another name")
    if name in PRESETS and not overwrite:
        raise ValueError(f"preset {name!r} is already registered (pass overwrite=True to replace it)")
    PRESETS[name] = make


def all_presets() -> dict[str, Callable[[], Config]]:
    """Every preset by name, the registered ones included (plugins loaded first).

    Returns:
        Name -> `() -> Config`, the built-in presets first.
    """
    load_plugins()
    return dict(PRESETS)


def names() -> list[str]:
    """Every preset's name."""
    return list(all_presets())


def get(name: str, **changes: Any) -> Config:
    """The preset `name`, with fields replaced from Python:
    `get("ppo-cartpole-anakin", seed=3, agent=dict(learning_rate=1e-3))`. Validated like
    the command line: an unknown preset or field, or a bad value, raises `ConfigError`."""
    presets = all_presets()
    if name not in presets:
        close = difflib.get_close_matches(name, list(presets), n=1)
        hint = f"; did you mean {close[0]}?" if close else "; see podracer.presets.names()"
        raise ConfigError(f"unknown preset {name!r}{hint}")
    return override(presets[name](), **changes)
