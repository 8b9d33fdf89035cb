"""Named presets for the optional environment suites (navix, XLand-MiniGrid, Jumanji,
Craftax), PPO under Anakin; merged into `PRESETS` by `experiments.presets`. Each needs its
suite's extra (`pip install 'podracer[navix]'`, ...); without it, training names the extra."""

from __future__ import annotations

from typing import Callable

from anakin.config import AnakinConfig
from podracer.agents import PPOConfig
from podracer.config import Config, EnvConfig

# Sparse-reward grid worlds: small networks, relu, the learning rate annealed to 0 (with a
# constant one, PPO's policy on these deterministic mazes can collapse to a loop once its
# entropy is spent).
_GRID_PPO = PPOConfig(learning_rate=5e-4, anneal_lr=True, activation="relu", hidden_sizes=(64, 64),
                      num_minibatches=4, entropy_coef=0.01)


def ppo_navix_empty5x5_anakin() -> Config:
    """PPO on navix's Empty-5x5 (reward 1 at the goal): the optimal return, 1.0, within 100k steps."""
    return Config(env=EnvConfig("navix/Navix-Empty-5x5-v0"), agent=_GRID_PPO,
                  arch=AnakinConfig(num_envs=16, rollout_length=32, updates_per_call=10), total_env_steps=100_000)


def ppo_xminigrid_empty5x5_anakin() -> Config:
    """PPO on XLand-MiniGrid's MiniGrid-Empty-5x5 (reward 1 - 0.9 steps / 100 at the goal):
    its optimum (0.955: the goal in 5 steps) within 100k steps."""
    return Config(env=EnvConfig("xminigrid/MiniGrid-Empty-5x5"), agent=_GRID_PPO,
                  arch=AnakinConfig(num_envs=16, rollout_length=32, updates_per_call=10), total_env_steps=100_000)


def ppo_jumanji_snake_anakin() -> Config:
    """PPO on Jumanji's Snake-v1 (12x12 grid, legal-action masks, a dict of fields seen by a
    convolution per image-like field): a return above 15 within 1M steps."""
    agent = PPOConfig(learning_rate=3e-4, anneal_lr=True, activation="relu", torso="multi_encoder",
                      hidden_sizes=(128,), shared_torso=True, num_minibatches=4, entropy_coef=0.01)
    return Config(env=EnvConfig("jumanji/Snake-v1"), agent=agent,
                  arch=AnakinConfig(num_envs=64, rollout_length=32, updates_per_call=10), total_env_steps=1_000_000)


def ppo_craftax_classic_anakin() -> Config:
    """PPO on Craftax-Classic-Symbolic (Craftax's PPO baseline settings, scaled to a CPU:
    fewer environments, narrower layers): 1M steps."""
    agent = PPOConfig(learning_rate=2e-4, anneal_lr=True, activation="tanh", hidden_sizes=(256, 256),
                      num_minibatches=8, gae_lambda=0.8, entropy_coef=0.01)
    return Config(env=EnvConfig("craftax/Craftax-Classic-Symbolic-v1"), agent=agent,
                  arch=AnakinConfig(num_envs=64, rollout_length=64, updates_per_call=4), total_env_steps=1_000_000)


SUITE_PRESETS: dict[str, Callable[[], Config]] = {
    "ppo-navix-empty5x5-anakin": ppo_navix_empty5x5_anakin,
    "ppo-xminigrid-empty5x5-anakin": ppo_xminigrid_empty5x5_anakin,
    "ppo-jumanji-snake-anakin": ppo_jumanji_snake_anakin,
    "ppo-craftax-classic-anakin": ppo_craftax_classic_anakin,
}
