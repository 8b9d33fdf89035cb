"""Named experiment presets: complete, typed configs that the command line can override."""

from __future__ import annotations

from typing import Callable

from anakin.config import AnakinConfig
from experiments.presets_dqn import DQN_PRESETS
from experiments.presets_impala import IMPALA_PRESETS
from experiments.presets_muzero import MUZERO_PRESETS
from experiments.presets_sebulba import SEBULBA_PRESETS
from podracer.agents import PPOConfig
from podracer.config import Config, EnvConfig


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
    **MUZERO_PRESETS,
}
