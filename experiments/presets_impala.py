"""Named presets for IMPALA on both architectures; merged into `PRESETS` by
`experiments.presets`.

The Sebulba ones run with `max_policy_lag 1`: actors act with parameters one version behind
the learner, which V-trace corrects for.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from anakin.config import AnakinConfig
from experiments.presets_common import ATARI_REPLAY, MINATAR_GAMES, atari_env, named, sebulba_twin, with_agent
from podracer.agents import ImpalaConfig
from podracer.config import Config, EnvConfig
from sebulba.config import SebulbaConfig


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


def impala_cartpole_sebulba() -> Config:
    """IMPALA on EnvPool's CartPole-v1 with actors one version behind the learner
    (96 envs split evenly over 1 to 4 learner devices)."""
    return sebulba_twin(
        impala_cartpole_anakin(), SebulbaConfig(num_envs=96, rollout_length=16, max_policy_lag=1, updates_per_log=20)
    )


def impala_pong_sebulba() -> Config:
    """IMPALA on Pong (EnvPool Atari v5), the paper's shallow-network settings: RMSProp
    (lr 6e-4, decay 0.99, eps 0.01), 32 envs x 20 steps, entropy 0.01, gradient norm 40,
    the IMPALA ResNet torso, actors one version behind."""
    return Config(
        env=atari_env("Pong-v5"),
        agent=ImpalaConfig(learning_rate=6e-4, optimizer="rmsprop", entropy_coef=0.01, max_grad_norm=40.0,
                           torso="impala_cnn", shared_torso=True, anneal_lr=True, unroll_sgd=True),
        arch=SebulbaConfig(num_envs=32, rollout_length=20, max_policy_lag=1, updates_per_log=10),
        total_env_steps=10_000_000,
    )


def impala_pong_sebulba_fast() -> Config:
    """IMPALA on Pong for throughput on a many-core host with one accelerator: Cleanba's
    settings (128 envs x 20 steps, RMSProp lr 6e-4, gradient norm 40, IMPALA ResNet),
    actors one version behind, and the actor layout measured and chosen for the host
    (`--arch.layout auto`)."""
    # Cleanba `cleanba_impala.py`: lr 6e-4 annealed, `local_num_envs=64` x
    # `num_actor_threads=2` = 128 envs per actor device, `num_steps=20`, 4 minibatches in one
    # pass, entropy 0.01, value 0.5, gradient norm 40, the IMPALA ResNet (16, 32, 32) + 256.
    base = impala_pong_sebulba()
    return dataclasses.replace(
        base, agent=dataclasses.replace(base.agent, num_minibatches=4),
        arch=SebulbaConfig(num_envs=128, rollout_length=20, max_policy_lag=1, updates_per_log=10, layout="auto"),
    )


def impala_replay_pong_sebulba() -> Config:
    """`impala-pong-sebulba` with replay (the RLDM 2019 recipe's replay; CLEAR/LASER style):
    half of each update's sequences are replayed from a 20k-step buffer per learner device
    (Atari steps are large: observation and next observation, 56 KB each) and V-trace
    corrects them."""
    return with_agent(impala_pong_sebulba(), **ATARI_REPLAY)


def impala_replay_latent_pong_sebulba() -> Config:
    """The RLDM 2019 recipe on Pong: `impala-replay-pong-sebulba` with a compressed latent,
    the IMPALA ResNet torso into a 64-unit latent that linear policy and value heads read,
    and a decoder reconstructing the four stacked frames (squared error on [0, 1] pixels,
    weight 1), trained with the agent."""
    return with_agent(impala_replay_pong_sebulba(), latent_size=64, reconstruction="mse", reconstruction_coef=1.0)


def impala_minatar(env_id: str, replay_fraction: float = 0.0) -> Config:
    """IMPALA on a MinAtar game under Anakin: 64 envs x 32 steps, Adam at a constant 5e-4,
    one pass of 4 minibatches of whole sequences, V-trace lambda 0.95, entropy 0.01,
    separate 2 x 256 ReLU actor and critic MLPs on the flattened grid (as the PPO MinAtar
    presets); with `replay_fraction`, that share of each update's sequences is replayed from
    a 100k-step buffer per device."""
    return Config(
        env=EnvConfig(env_id),
        agent=ImpalaConfig(
            learning_rate=5e-4, optimizer="adam", anneal_lr=False, max_grad_norm=0.5, num_epochs=1,
            num_minibatches=4, gamma=0.99, vtrace_lambda=0.95, entropy_coef=0.01, hidden_sizes=(256, 256),
            activation="relu", replay_fraction=replay_fraction, replay_capacity=100_000,
        ),
        arch=AnakinConfig(num_envs=64, rollout_length=32, updates_per_call=16),
        total_env_steps=10_000_000,
    )


def _impala_replay_minatar(env_id: str) -> Config:
    return impala_minatar(env_id, replay_fraction=0.5)


def impala_replay_latent_minatar(env_id: str) -> Config:
    """The RLDM 2019 recipe on MinAtar under Anakin: `impala-replay-*-minatar-anakin` (half of
    each update replayed) with a compressed latent: one 2 x 256 ReLU encoder into a 32-unit
    latent that linear policy and value heads read, and a decoder reconstructing the grid,
    its sigmoid cross-entropy (the cells are 0/1) added to the loss at weight 1."""
    base = impala_minatar(env_id, replay_fraction=0.5)
    return dataclasses.replace(base, agent=dataclasses.replace(
        base.agent, shared_torso=True, latent_size=32, reconstruction="sigmoid_ce", reconstruction_coef=1.0))


IMPALA_PRESETS: dict[str, Callable[[], Config]] = {
    "impala-cartpole-anakin": impala_cartpole_anakin,
    "impala-cartpole-sebulba": impala_cartpole_sebulba,
    "impala-pong-sebulba": impala_pong_sebulba,
    "impala-pong-sebulba-fast": impala_pong_sebulba_fast,
    "impala-replay-pong-sebulba": impala_replay_pong_sebulba,
    "impala-replay-latent-pong-sebulba": impala_replay_latent_pong_sebulba,
    **{f"impala-{game}-minatar-anakin": named(
        impala_minatar, env_id, f"IMPALA on {env_id} (2x256 MLP, Adam), 10M env steps")
       for game, env_id in MINATAR_GAMES.items() if game in ("breakout", "space-invaders")},
    **{f"impala-replay-{game}-minatar-anakin": named(
        _impala_replay_minatar, env_id, f"IMPALA on {env_id} with half of each update replayed, 10M env steps")
       for game, env_id in MINATAR_GAMES.items() if game in ("breakout", "space-invaders")},
    **{f"impala-replay-latent-{game}-minatar-anakin": named(
        impala_replay_latent_minatar, env_id,
        f"IMPALA on {env_id}, half replayed, a 32-unit auto-encoder latent (RLDM 2019 recipe), 10M env steps")
       for game, env_id in MINATAR_GAMES.items() if game in ("breakout", "space-invaders")},
}
