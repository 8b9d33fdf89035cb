"""Named presets for continuous control: PPO with a Gaussian policy, observation
normalisation and reward scaling, after CleanRL's `ppo_continuous_action.py`."""

from __future__ import annotations

from typing import Callable

from anakin.config import AnakinConfig
from podracer.agents import PPOConfig
from podracer.config import Config, EnvConfig
from sebulba.config import SebulbaConfig


def continuous_ppo() -> PPOConfig:
    """CleanRL's `ppo_continuous_action.py` hyperparameters: lr 3e-4 annealed, 10 epochs of
    32 minibatches over 2048 transitions, gamma 0.99, GAE lambda 0.95, clip 0.2 (values
    too), no entropy bonus, 64x64 tanh actor and critic apart, log-std starting at 0,
    observations normalised and rewards scaled by the return's std (both clipped to 10)."""
    return PPOConfig(
        learning_rate=3e-4, anneal_lr=True, num_epochs=10, num_minibatches=32, gamma=0.99, gae_lambda=0.95,
        clip_eps=0.2, clip_value=True, entropy_coef=0.0, value_coef=0.5, max_grad_norm=0.5,
        hidden_sizes=(64, 64), activation="tanh", shared_torso=False, log_std_init=0.0,
        normalize_observations=True, obs_clip=10.0, scale_rewards=True, reward_clip=10.0,
    )


def ppo_pendulum_anakin() -> Config:
    """PPO on gymnax Pendulum-v1 with CleanRL's continuous settings (16 envs x 128 steps)."""
    return Config(
        env=EnvConfig("Pendulum-v1"),
        agent=continuous_ppo(),
        arch=AnakinConfig(num_envs=16, rollout_length=128, updates_per_call=8),
        total_env_steps=1_000_000,
    )


def ppo_halfcheetah_sebulba() -> Config:
    """PPO on EnvPool's HalfCheetah-v4 with CleanRL's continuous settings, 1M env steps.

    CleanRL steps one environment for 2048 steps per update; here 4 environments x 512
    steps make the same 2048-transition batch with a quarter of the policy calls (each
    batch of 4 splits over 1, 2 or 4 learner devices). On-policy: actors wait for each
    update (`max_policy_lag=0`), as CleanRL's acting and learning take turns."""
    return Config(
        env=EnvConfig("HalfCheetah-v4"),
        agent=continuous_ppo(),
        arch=SebulbaConfig(num_envs=4, rollout_length=512, max_policy_lag=0, updates_per_log=4),
        total_env_steps=1_000_000,
    )


def ppo_inverted_pendulum_brax_anakin() -> Config:
    """PPO on Brax's inverted_pendulum (needs `pip install podracer[brax]`), CleanRL's settings."""
    return Config(
        env=EnvConfig("brax/inverted_pendulum"),
        agent=continuous_ppo(),
        arch=AnakinConfig(num_envs=16, rollout_length=128, updates_per_call=8),
        total_env_steps=300_000,
    )


CONTINUOUS_PRESETS: dict[str, Callable[[], Config]] = {
    "ppo-pendulum-anakin": ppo_pendulum_anakin,
    "ppo-halfcheetah-sebulba": ppo_halfcheetah_sebulba,
    "ppo-inverted-pendulum-brax-anakin": ppo_inverted_pendulum_brax_anakin,
}
