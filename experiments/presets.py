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
from experiments.presets_td3 import TD3_PRESETS
from podracer.config import Config, ConfigError

# Every preset by name: one `<ALGORITHM>_PRESETS` dict per `experiments/presets_<algorithm>.py`
# module, each holding that algorithm's presets for both architectures (shared pieces in
# `experiments.presets_common`). The first is the default example (`ppo-cartpole-anakin`).
PRESETS: dict[str, Callable[[], Config]] = {
    **PPO_PRESETS,
    **IMPALA_PRESETS,
    **DQN_PRESETS,
    **PQN_PRESETS,
    **MUZERO_PRESETS,
    **SAC_PRESETS,
    **TD3_PRESETS,
}


_BUILTIN = frozenset(PRESETS)


def register_preset(name: str, make: Callable[[], Config], overwrite: bool = False) -> None:
    """Add a preset of your own (say, for an environment or algorithm you registered):
    `make()` returns its complete `Config`. The `podracer` command sees it when the module
    that registers it is named in `$PODRACER_IMPORT`. Built-in names cannot be taken; a name
    you registered is replaced only with `overwrite`."""
    if not isinstance(name, str) or not name or name.startswith("-") or any(c.isspace() for c in name):
        raise ValueError(f"a preset name is a non-empty word that does not start with '-', got {name!r}")
    if not callable(make):
        raise TypeError(f"preset {name!r}: make must be callable (() -> Config), got {make!r}")
    if name in _BUILTIN:
        raise ValueError(f"preset {name!r} is built-in; choose another name")
    if name in PRESETS and not overwrite:
        raise ValueError(f"preset {name!r} is already registered (pass overwrite=True to replace it)")
    PRESETS[name] = make


def names() -> list[str]:
    """Every preset's name."""
    return list(PRESETS)


def get(name: str, **changes: Any) -> Config:
    """The preset `name`, with fields replaced from Python:
    `get("ppo-cartpole-anakin", seed=3, agent=dict(learning_rate=1e-3))`. Validated like
    the command line: an unknown preset or field, or a bad value, raises `ConfigError`."""
    if name not in PRESETS:
        close = difflib.get_close_matches(name, list(PRESETS), n=1)
        hint = f"; did you mean {close[0]}?" if close else "; see podracer.presets.names()"
        raise ConfigError(f"unknown preset {name!r}{hint}")
    return override(PRESETS[name](), **changes)
