"""Named presets for SAC: gymnax Pendulum and Brax's inverted_pendulum under Anakin, EnvPool
MuJoCo under Sebulba (TD3's, in `experiments.presets_td3`, share their layouts);
merged into `PRESETS` by `experiments.presets`."""

from __future__ import annotations

import dataclasses
from typing import Callable

from anakin.config import AnakinConfig
from podracer.agents import SACConfig, TD3Config  # TD3Config: the layouts TD3's presets share
from podracer.config import Config, EnvConfig
from sebulba.config import SebulbaConfig

# One gradient step of 256 per env step (CleanRL's SAC and TD3): a replay ratio of 256
# samples per env step, whatever the layout's T * B.
REPLAY_RATIO = 256.0


def sac_pendulum_anakin() -> Config:
    """SAC on gymnax Pendulum-v1: 4 envs x 8 steps per update, 32 gradient steps of 256
    each (replay ratio 256), 1k random env steps first; 20k env steps. Run
    `--arch.num-seeds 4` for four seeds in one program."""
    return Config(
        env=EnvConfig("Pendulum-v1"),
        agent=SACConfig(buffer_size=20_000, replay_ratio=REPLAY_RATIO, learning_starts=1_000),
        arch=AnakinConfig(num_envs=4, rollout_length=8, updates_per_call=25),
        total_env_steps=20_000,
    )


def sac_pendulum_crossq_anakin() -> Config:
    """`sac-pendulum-anakin` with CrossQ's critics (Bhatt et al. 2024): Batch
    Renormalization, no target networks, the actor every 3rd gradient step, Adam's beta1 0.5
    (the paper's); plain batch norm for the first 5k gradient steps (CrossQ's reference
    warms up for 100k, beyond this run's 19k)."""
    config = sac_pendulum_anakin()
    return dataclasses.replace(config, agent=dataclasses.replace(config.agent, critic="crossq", policy_delay=3,
                                                                 adam_b1=0.5, renorm_warmup=5_000))


def sac_inverted_pendulum_brax_anakin() -> Config:
    """SAC on Brax's inverted_pendulum (needs `pip install podracer[brax]`): a return is the
    number of steps the pole stays up, 1000 at most, so a CPU shows it learning. 8 envs x 8
    steps per update, 64 gradient steps of 256 each (replay ratio 256), 1k random env steps
    first; 20k env steps. Measured, 2 seeds on 2 loaded CPU cores (docs/algorithms/sac_td3.md):
    at 20k env steps the mean action balances for 1000 steps (the maximum) with one seed, for
    101 with the other; 864 s of training for both."""
    return Config(
        env=EnvConfig("brax/inverted_pendulum"),
        agent=SACConfig(buffer_size=100_000, replay_ratio=REPLAY_RATIO, learning_starts=1_000),
        arch=AnakinConfig(num_envs=8, rollout_length=8, updates_per_call=16),
        total_env_steps=20_000,
    )


def halfcheetah(agent: SACConfig | TD3Config) -> Config:
    """EnvPool's HalfCheetah-v4 (the `ppo-halfcheetah-sebulba` id): 2 envs x 32 steps per
    trajectory, 64 gradient steps of 256 per update (replay ratio 256), actors one version
    ahead of the learner; 300k env steps."""
    return Config(
        env=EnvConfig("HalfCheetah-v4"),
        agent=agent,
        arch=SebulbaConfig(num_envs=2, rollout_length=32, max_policy_lag=1, updates_per_log=20),
        total_env_steps=300_000,
    )


def sac_halfcheetah_sebulba() -> Config:
    """SAC on EnvPool's HalfCheetah-v4 with CleanRL's settings (5k random steps, lr 3e-4 actor,
    1e-3 critics and temperature, 1M buffer), 300k env steps. Measured on 2 CPU cores
    (docs/algorithms/sac_td3.md): training return 9,418 at 300k, mean of 2 seeds; about 35 min
    a seed on an idle machine."""
    return halfcheetah(SACConfig(replay_ratio=REPLAY_RATIO, learning_starts=5_000))


SAC_PRESETS: dict[str, Callable[[], Config]] = {
    "sac-pendulum-anakin": sac_pendulum_anakin,
    "sac-pendulum-crossq-anakin": sac_pendulum_crossq_anakin,
    "sac-halfcheetah-sebulba": sac_halfcheetah_sebulba,
    "sac-inverted-pendulum-brax-anakin": sac_inverted_pendulum_brax_anakin,
}
