"""Named presets for DQN on both architectures: classic control and Atari; merged into
`PRESETS` by `experiments.presets`."""

from __future__ import annotations

import dataclasses
from typing import Callable

from anakin.config import AnakinConfig
from experiments.presets_common import atari_env, sebulba_twin
from podracer.agents import DQNConfig
from podracer.config import Config, EnvConfig
from sebulba.config import SebulbaConfig


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


def dqn_cartpole_sebulba() -> Config:
    """Double DQN with 3-step returns on EnvPool's CartPole-v1, replay ratio 12.8 (as the
    Anakin preset): 12 envs x 10 steps per update, split over 1, 2 or 3 learner devices
    (a buffer of 50k each); actors run one parameter version ahead of the learner."""
    anakin = dqn_cartpole_anakin()
    # a replay ratio, not a step count, as a learner device's share of a batch depends on the
    # layout (gradient_steps, ignored with replay_ratio, back to its default)
    agent = dataclasses.replace(anakin.agent, replay_ratio=12.8, gradient_steps=1)
    return sebulba_twin(anakin, SebulbaConfig(num_envs=12, rollout_length=10, max_policy_lag=1, updates_per_log=25),
                        agent=agent)


def dqn_breakout_sebulba() -> Config:
    """DQN on Breakout (EnvPool Atari v5): Nature CNN, Huber loss, Adam 1e-4, batch 32 at
    replay ratio 8 (one batch per 4 env steps), target copied every 2000 gradient steps
    (8000 env steps), epsilon 1 -> 0.01 over 1M env steps, 3-step Double DQN targets.

    Replay holds 100k transitions per learner device, not Mnih et al.'s 1M: a transition
    keeps its observation and its bootstrap observation, two 84x84x4 uint8 stacks (55 KiB),
    so 100k take 5.3 GiB per learner device (16 GiB over the 3 learners of a 4-device
    layout) and fit a 24 GiB host beside everything else.

    6 envs x 16 steps per update: 24 gradient steps on one learner device, 8 on each of 3.
    `unroll_sgd` because XLA:CPU runs convolution gradients in a loop ~20x slower than
    unrolled (a 2-3 minute compile instead); on a GPU, `--agent.unroll-sgd false`.
    """
    return Config(
        env=atari_env("Breakout-v5"),
        agent=DQNConfig(
            learning_rate=1e-4, adam_eps=1.5e-4, max_grad_norm=10.0, loss="huber", gamma=0.99, n_step=3,
            double_q=True, buffer_size=100_000, batch_size=32, replay_ratio=8.0, learning_starts=80_000,
            target_update_period=2_000, epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=1_000_000,
            torso="nature_cnn", unroll_sgd=True,
        ),
        arch=SebulbaConfig(num_envs=6, rollout_length=16, max_policy_lag=1, updates_per_log=25),
        total_env_steps=10_000_000,
    )


DQN_PRESETS: dict[str, Callable[[], Config]] = {
    "dqn-cartpole-anakin": dqn_cartpole_anakin,
    "dqn-cartpole-sebulba": dqn_cartpole_sebulba,
    "dqn-breakout-sebulba": dqn_breakout_sebulba,
}
