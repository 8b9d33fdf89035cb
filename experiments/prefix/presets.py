"""Presets of PrefixRL's agent (Roy et al., DAC 2021) on the prefix-adder environments, for
both architectures: Double DQN with the convolutional Q-maps of the "prefix_conv" torso,
registered by `experiments.prefix.plugin`."""

from __future__ import annotations

from typing import Any, Callable

from anakin.config import AnakinConfig
from podracer.agents import DQNConfig
from podracer.config import Config, EnvConfig
from sebulba.config import SebulbaConfig


def _prefix_dqn(bits: int, **changes) -> DQNConfig:
    """Double DQN with PrefixRL's convolutional Q-maps, sized for a CPU."""
    settings = dict(
        learning_rate=3e-4, loss="huber", gamma=0.75, n_step=1, double_q=True, buffer_size=50_000,
        batch_size=64, replay_ratio=4.0, learning_starts=2_000, target_update_period=200,
        epsilon_start=1.0, epsilon_end=0.05, epsilon_decay_steps=20 * bits * 100,
        torso="prefix_conv", torso_options=("blocks=4", "channels=32"), unroll_sgd=True,
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
    return _synth_sebulba(bits, num_envs=16, total_env_steps=total_env_steps, env=env,
                          torso_options=("blocks=2", "channels=16"), learning_starts=512,
                          epsilon_decay_steps=epsilon_decay_steps)


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


PREFIX_PRESETS: dict[str, Callable[[], Config]] = {
    "dqn-prefix16-anakin": dqn_prefix16_anakin,
    "dqn-prefix16-sebulba": dqn_prefix16_sebulba,
    "dqn-prefix32-sebulba": dqn_prefix32_sebulba,
    "dqn-prefix16-front-sebulba": dqn_prefix16_front_sebulba,
    "dqn-prefix32-front-sebulba": dqn_prefix32_front_sebulba,
}


def upgrade_dqn_section(section: dict[str, Any]) -> dict[str, Any]:
    """A saved DQN config section written while the prefix torso's options were fields of
    DQNConfig (`prefix_blocks`, `prefix_channels`, defaults 4 and 32) with those options as
    `torso_options`, so that such runs resume and evaluate (`podracer.config`'s upgrades).

    Args:
        section: a saved `DQNConfig` section.

    Returns:
        The section without those fields; the prefix torso's options as `torso_options`.
    """
    if "prefix_blocks" not in section and "prefix_channels" not in section:
        return section
    blocks, channels = section.pop("prefix_blocks", 4), section.pop("prefix_channels", 32)
    if section.get("torso") == "prefix_conv" and not section.get("torso_options"):
        section["torso_options"] = [f"blocks={blocks}", f"channels={channels}"]
    return section
