"""Named presets for TD3: gymnax Pendulum and Brax's halfcheetah under Anakin, EnvPool MuJoCo
under Sebulba, with SAC's layouts (`experiments.presets_sac`); merged into `PRESETS` by `experiments.presets`."""

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


def td3_halfcheetah_brax_anakin() -> Config:
    """FastTD3's recipe (Seo et al. 2025) on Brax's halfcheetah (needs `pip install
    podracer[brax]`), for an accelerator: 1024 parallel environments stepping once per
    update, batches of 32768, 2 gradient steps per update, the distributional critic (101
    atoms in [-500, 500]), 3-step returns, gamma 0.97, tau 0.1, target noise 0.1, 10 env
    steps per environment (10240) of random actions first and a buffer of 10240 steps per
    environment, critics 1024-512-256 wide (FastTD3's MuJoCo Playground settings and those
    of its CheetahRun). Not FastTD3's: the actor shares the critics' widths (FastTD3's is
    512-256-128), exploration noise is one std (0.2) rather than one drawn per environment
    in [0.1, 0.4], and there is no observation normalisation or weight decay. 10M env steps.
    Measured on 2 loaded CPU cores only (docs/algorithms/sac_td3.md): it runs, at about 32 s
    per gradient step, too slow for a return (the first episodes end at 1M env steps); its
    wall time to a published return needs a GPU."""
    return Config(
        env=EnvConfig("brax/halfcheetah"),
        agent=TD3Config(buffer_size=1024 * 10_240, batch_size=32_768, gradient_steps=2, learning_starts=10_240,
                        n_step=3, gamma=0.97, tau=0.1, hidden_sizes=(1024, 512, 256), exploration_noise=0.2,
                        target_noise=0.1, critic="distributional", num_atoms=101, v_min=-500.0, v_max=500.0),
        arch=AnakinConfig(num_envs=1024, rollout_length=1, updates_per_call=50),
        total_env_steps=10_240_000,
    )


def td3_halfcheetah_sebulba() -> Config:
    """TD3 on EnvPool's HalfCheetah-v4 with CleanRL's settings (25k random steps, lr 3e-4,
    policy delay 2, 1M buffer), 300k env steps."""
    return halfcheetah(TD3Config(replay_ratio=REPLAY_RATIO, learning_starts=25_000))


TD3_PRESETS: dict[str, Callable[[], Config]] = {
    "td3-pendulum-anakin": td3_pendulum_anakin,
    "td3-pendulum-fast-anakin": td3_pendulum_fast_anakin,
    "td3-halfcheetah-sebulba": td3_halfcheetah_sebulba,
    "td3-halfcheetah-brax-anakin": td3_halfcheetah_brax_anakin,
}
