"""Named presets for TD3: gymnax Pendulum under Anakin, EnvPool MuJoCo under Sebulba, with
SAC's layouts (`experiments.presets_sac`); merged into `PRESETS` by `experiments.presets`."""

from __future__ import annotations

from typing import Callable

from anakin.config import AnakinConfig
from experiments.presets_sac import REPLAY_RATIO, halfcheetah
from podracer.agents import TD3Config
from podracer.config import Config, EnvConfig


def td3_pendulum_anakin() -> Config:
    """TD3 on gymnax Pendulum-v1, the SAC preset's layout and replay ratio, learning rates
    1e-3; 20k env steps."""
    return Config(
        env=EnvConfig("Pendulum-v1"),
        agent=TD3Config(buffer_size=20_000, replay_ratio=REPLAY_RATIO, learning_starts=1_000,
                        actor_learning_rate=1e-3, critic_learning_rate=1e-3),
        arch=AnakinConfig(num_envs=4, rollout_length=8, updates_per_call=25),
        total_env_steps=20_000,
    )


def td3_pendulum_fast_anakin() -> Config:
    """FastTD3's recipe (Seo et al. 2025) on gymnax Pendulum-v1: many parallel environments
    (32, one step each per update), large batches (1024), several gradient steps per update
    (4) and the distributional critic (101 atoms; Pendulum's returns lie in [-1200, 0] at
    gamma 0.99), 3-step returns; 20k env steps."""
    return Config(
        env=EnvConfig("Pendulum-v1"),
        agent=TD3Config(buffer_size=20_000, batch_size=1024, gradient_steps=4, learning_starts=1_024, n_step=3,
                        actor_learning_rate=1e-3, critic_learning_rate=1e-3, critic="distributional",
                        num_atoms=101, v_min=-1200.0, v_max=0.0),
        arch=AnakinConfig(num_envs=32, rollout_length=1, updates_per_call=50),
        total_env_steps=20_000,
    )


def td3_halfcheetah_sebulba() -> Config:
    """TD3 on EnvPool's HalfCheetah-v4 with CleanRL's settings (25k random steps, lr 3e-4,
    policy delay 2, 1M buffer), 300k env steps."""
    return halfcheetah(TD3Config(replay_ratio=REPLAY_RATIO, learning_starts=25_000))


TD3_PRESETS: dict[str, Callable[[], Config]] = {
    "td3-pendulum-anakin": td3_pendulum_anakin,
    "td3-pendulum-fast-anakin": td3_pendulum_fast_anakin,
    "td3-halfcheetah-sebulba": td3_halfcheetah_sebulba,
}
