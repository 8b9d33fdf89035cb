"""Named presets for DQN; merged into `PRESETS` by the launcher."""

from __future__ import annotations

from typing import Callable

from anakin.config import AnakinConfig
from podracer.agents import DQNConfig
from podracer.config import Config, EnvConfig


def dqn_cartpole_anakin() -> Config:
    """Double DQN with 3-step returns on CartPole-v1: 8 envs x 10 steps per update, 8
    gradient steps of 128 (a replay ratio of 12.8 samples per env step, CleanRL's), target
    copied every 100 gradient steps. Mean return >= 400 by 100k-220k env steps and 500 by
    ~350k (3 seeds, one device)."""
    return Config(
        env=EnvConfig("CartPole-v1"),
        agent=DQNConfig(
            learning_rate=2.5e-4, loss="mse", n_step=3, buffer_size=50_000, batch_size=128,
            gradient_steps=8, learning_starts=10_000, target_update_period=100,
            epsilon_end=0.01, epsilon_decay_steps=100_000,
        ),
        arch=AnakinConfig(num_envs=8, rollout_length=10, updates_per_call=250),
        total_env_steps=500_000,
    )


DQN_PRESETS: dict[str, Callable[[], Config]] = {
    "dqn-cartpole-anakin": dqn_cartpole_anakin,
}
