"""Named presets for DQN on both architectures: classic control, Atari, and PrefixRL's agent
(Roy et al., DAC 2021) on the prefix-adder environments; merged into `PRESETS` by
`experiments.presets`."""

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


# PrefixRL on the prefix-adder environments.


def _prefix_dqn(bits: int, **changes) -> DQNConfig:
    """Double DQN with PrefixRL's convolutional Q-maps, sized for a CPU."""
    settings = dict(
        learning_rate=3e-4, loss="huber", gamma=0.75, n_step=1, double_q=True, buffer_size=50_000,
        batch_size=64, replay_ratio=4.0, learning_starts=2_000, target_update_period=200,
        epsilon_start=1.0, epsilon_end=0.05, epsilon_decay_steps=20 * bits * 100,
        torso="prefix_conv", prefix_blocks=4, prefix_channels=32, unroll_sgd=True,
    )
    return DQNConfig(**{**settings, **changes})


def dqn_prefix16_anakin() -> Config:
    """PrefixRL's Double DQN on the 16-bit JAX prefix-adder environment with analytic costs
    (area = node count, delay = logic level), under Anakin: the area weight w is sampled per
    episode and observed as a fifth channel, so one agent covers the area-delay trade-off and
    its fully convolutional Q-network scalarises separate area and delay Q-maps with that w
    (trained on the scalarised reward, as the environment reports only that); episodes of 2N
    = 32 steps start from ripple, Sklansky or a random legal graph; 32 envs x 8 steps per
    update at a replay ratio of 4 (8 gradient steps of 64, unrolled because XLA:CPU runs
    convolution gradients slowly in a loop), gamma 0.75 as the reward is a per-step cost
    decrease, target copied every 200 gradient steps, epsilon 1 -> 0.05 over 32k env steps;
    200k env steps in all. `podracer prefix-front RUN_DIR` then shows the designs it reached."""
    return Config(
        env=EnvConfig("PrefixAdder-16"),
        agent=_prefix_dqn(16),
        arch=AnakinConfig(num_envs=32, rollout_length=8, updates_per_call=25),
        total_env_steps=200_000,
    )


def _synth_sebulba(bits: int, num_envs: int, total_env_steps: int, env: EnvConfig | None = None,
                   **agent_changes) -> Config:
    return Config(
        env=env or EnvConfig(f"PrefixAdderSynth-{bits}"),
        agent=_prefix_dqn(bits, **{"learning_starts": 1_000, **agent_changes}),
        arch=SebulbaConfig(num_envs=num_envs, rollout_length=8, max_policy_lag=1, updates_per_log=10),
        total_env_steps=total_env_steps,
    )


def dqn_prefix16_sebulba() -> Config:
    """PrefixRL's Double DQN on the 16-bit prefix-adder host environment whose rewards come
    from synthesis (Yosys/ABC with a structure-preserving mapping) through the pool of reward
    workers with its disk cache, under Sebulba: actors step 16 environments (8 steps per
    trajectory, one parameter version ahead of the learner) and never block on a synthesis
    beyond the pool's bounded wait; the learner replays at a ratio of 4 samples per env step
    (the bounded replay ratio of PrefixRL, here the DQN credit scheme); w is sampled per
    episode and observed, and the Q-network scalarises its area and delay Q-maps with it; the
    same network settings as `dqn-prefix16-anakin`; 50k env steps, a budget in which the
    cache keeps the unique syntheses to a few thousand (the run logs them)."""
    return _synth_sebulba(16, num_envs=16, total_env_steps=50_000)


def dqn_prefix32_sebulba() -> Config:
    """PrefixRL's Double DQN on the 32-bit synthesis-reward prefix-adder host environment
    under Sebulba, as `dqn-prefix16-sebulba` but with 32-bit graphs (2048 actions, episodes
    of 64 steps from ripple, Sklansky or random starts), epsilon decaying over 64k env steps
    and 100k env steps in all; the fully convolutional Q-network has the same parameters
    whatever the width, so it can also start from a 16-bit run's checkpoint. Synthesis of a
    32-bit adder takes ~0.1 s on this CPU, so the reward pool (and its cache) sets the pace."""
    return _synth_sebulba(32, num_envs=16, total_env_steps=100_000)


def _front_sebulba(bits: int, epsilon_decay_steps: int, total_env_steps: int) -> Config:
    env = EnvConfig(f"PrefixAdderSynth-{bits}", max_episode_steps=1, params=("front_restarts=1",))
    return _synth_sebulba(bits, num_envs=16, total_env_steps=total_env_steps, env=env, prefix_channels=16,
                          prefix_blocks=2, learning_starts=512, epsilon_decay_steps=epsilon_decay_steps)


def dqn_prefix16_front_sebulba() -> Config:
    """`dqn-prefix16-sebulba` for a budget of a few thousand syntheses (`podracer bench
    prefix`'s default): every episode is one edit of a design drawn from the Pareto front of
    the designs found so far (`front_restarts=1`, one step per episode), so the agent learns
    which edit of which front design improves its w-cost, and every synthesis is spent next
    to the front; a smaller network (16 channels, 2 blocks) that updates ~5x faster, and
    epsilon 1 -> 0.05 over 2k env steps; 20k env steps in all (about 5k unique syntheses: as
    the policy settles it proposes designs it has seen, which the cache answers for free)."""
    return _front_sebulba(16, epsilon_decay_steps=2_000, total_env_steps=20_000)


def dqn_prefix32_front_sebulba() -> Config:
    """`dqn-prefix16-front-sebulba` on 32-bit adders, epsilon decaying over 4k env steps,
    40k env steps in all."""
    return _front_sebulba(32, epsilon_decay_steps=4_000, total_env_steps=40_000)


DQN_PRESETS: dict[str, Callable[[], Config]] = {
    "dqn-cartpole-anakin": dqn_cartpole_anakin,
    "dqn-cartpole-sebulba": dqn_cartpole_sebulba,
    "dqn-breakout-sebulba": dqn_breakout_sebulba,
    "dqn-prefix16-anakin": dqn_prefix16_anakin,
    "dqn-prefix16-sebulba": dqn_prefix16_sebulba,
    "dqn-prefix32-sebulba": dqn_prefix32_sebulba,
    "dqn-prefix16-front-sebulba": dqn_prefix16_front_sebulba,
    "dqn-prefix32-front-sebulba": dqn_prefix32_front_sebulba,
}
