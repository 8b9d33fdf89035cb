"""Named presets for PQN on classic tasks (the MinAtar ones are in `presets_minatar`)."""

from __future__ import annotations

import dataclasses
from typing import Callable

from anakin.config import AnakinConfig
from podracer.agents import PQNConfig
from podracer.config import Config, EnvConfig
from sebulba.config import SebulbaConfig


def pqn_cartpole_anakin() -> Config:
    """PQN on CartPole-v1 with purejaxql's settings: 32 envs x 64 steps, 4 epochs x 16
    minibatches, RAdam 1e-4 decayed, rewards x 0.1, Q(lambda) 0.95, epsilon 1 -> 0.2 over
    100k env steps, 2 x 256 LayerNorm MLP. Return ~460 (epsilon 0.2 in training) by 160k
    env steps, 500 greedy."""
    return Config(
        env=EnvConfig("CartPole-v1"),
        agent=PQNConfig(learning_rate=1e-4, num_epochs=4, num_minibatches=16, q_lambda=0.95, reward_scale=0.1,
                        epsilon_end=0.2, epsilon_decay_steps=100_000, hidden_sizes=(256, 256)),
        arch=AnakinConfig(num_envs=32, rollout_length=64, updates_per_call=20),
        total_env_steps=500_000,
    )


def pqn_catch_anakin() -> Config:
    """PQN on Catch: a return above 0.8 (with epsilon 0.05 in training) within ~15k env steps."""
    return Config(
        env=EnvConfig("Catch"),
        agent=PQNConfig(learning_rate=3e-3, anneal_lr=False, num_epochs=2, num_minibatches=4, q_lambda=0.65,
                        epsilon_end=0.05, epsilon_decay_steps=5_000, hidden_sizes=(64,)),
        arch=AnakinConfig(num_envs=32, rollout_length=8, updates_per_call=20),
        total_env_steps=50_000,
    )


def pqn_cartpole_sebulba() -> Config:
    """PQN on EnvPool's CartPole-v1 (`pqn-cartpole-anakin`'s settings): 48 envs x 64 steps,
    split evenly over 1 to 4 learner devices; actors one version ahead of the learner."""
    return dataclasses.replace(
        pqn_cartpole_anakin(), arch=SebulbaConfig(num_envs=48, rollout_length=64, max_policy_lag=1, updates_per_log=10)
    )


PQN_PRESETS: dict[str, Callable[[], Config]] = {
    "pqn-cartpole-anakin": pqn_cartpole_anakin,
    "pqn-catch-anakin": pqn_catch_anakin,
    "pqn-cartpole-sebulba": pqn_cartpole_sebulba,
}
