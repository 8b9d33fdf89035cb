"""Named experiment presets: complete, typed configs that the command line can override."""

from __future__ import annotations

import difflib
from typing import Any, Callable

from anakin.config import AnakinConfig
from experiments.overrides import override
from experiments.presets_continuous import CONTINUOUS_PRESETS
from experiments.presets_dqn import DQN_PRESETS
from experiments.presets_impala import IMPALA_PRESETS
from experiments.presets_minatar import MINATAR_PRESETS
from experiments.presets_muzero import MUZERO_PRESETS
from experiments.presets_pqn import PQN_PRESETS
from experiments.presets_prefix import PREFIX_PRESETS
from experiments.presets_sebulba import SEBULBA_PRESETS
from podracer.agents import PPOConfig
from podracer.config import Config, ConfigError, EnvConfig


def ppo_cartpole_anakin() -> Config:
    """PPO on CartPole-v1 with the CleanRL / PureJaxRL hyperparameters; learns in ~1 min on a CPU."""
    return Config(
        env=EnvConfig("CartPole-v1"),
        agent=PPOConfig(),
        arch=AnakinConfig(num_envs=4, rollout_length=128),
        total_env_steps=500_000,
    )


def ppo_catch_anakin() -> Config:
    """PPO on Catch, the Podracer paper's example: a perfect score (1.0) within 100k steps."""
    return Config(
        env=EnvConfig("Catch"),
        agent=PPOConfig(learning_rate=5e-4, anneal_lr=False, activation="relu"),
        arch=AnakinConfig(num_envs=32, rollout_length=16, updates_per_call=20),
        total_env_steps=100_000,
    )


PRESETS: dict[str, Callable[[], Config]] = {
    "ppo-cartpole-anakin": ppo_cartpole_anakin,
    "ppo-catch-anakin": ppo_catch_anakin,
    **IMPALA_PRESETS,
    **SEBULBA_PRESETS,
    **DQN_PRESETS,
    **CONTINUOUS_PRESETS,
    **PQN_PRESETS,
    **MINATAR_PRESETS,
    **PREFIX_PRESETS,
    **MUZERO_PRESETS,
}


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
