"""Named presets for IMPALA (and PPO with V-trace); merged into `PRESETS` by the launcher.

Anakin only for now: Sebulba presets (`impala-cartpole-sebulba`, `impala-pong-sebulba`,
`ppo-vtrace-pong-sebulba`) come with the Sebulba runner's config.
"""

from __future__ import annotations

from typing import Callable

from anakin.config import AnakinConfig
from podracer.agents import ImpalaConfig, PPOConfig
from podracer.config import Config, EnvConfig


def impala_cartpole_anakin() -> Config:
    """IMPALA on CartPole-v1: many short sequences, Adam, two passes of 8 minibatches of
    whole sequences per batch. Mean return >= 475 within ~0.5M env steps (3 seeds)."""
    return Config(
        env=EnvConfig("CartPole-v1"),
        agent=ImpalaConfig(
            learning_rate=1e-3, optimizer="adam", max_grad_norm=0.5, num_epochs=2, num_minibatches=8,
            vtrace_lambda=0.95,
        ),
        arch=AnakinConfig(num_envs=128, rollout_length=16, updates_per_call=25),
        total_env_steps=1_000_000,
    )


def ppo_vtrace_cartpole_anakin() -> Config:
    """PPO with V-trace advantages on CartPole-v1 (on-policy under Anakin: a check that the
    V-trace path learns as well as GAE)."""
    return Config(
        env=EnvConfig("CartPole-v1"),
        agent=PPOConfig(advantage="vtrace"),
        arch=AnakinConfig(num_envs=4, rollout_length=128),
        total_env_steps=500_000,
    )


IMPALA_PRESETS: dict[str, Callable[[], Config]] = {
    "impala-cartpole-anakin": impala_cartpole_anakin,
    "ppo-vtrace-cartpole-anakin": ppo_vtrace_cartpole_anakin,
}
