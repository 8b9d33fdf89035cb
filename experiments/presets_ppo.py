"""Named presets for PPO on both architectures: classic control, Atari, V-trace advantages,
continuous control and MinAtar; merged into `PRESETS` by `experiments.presets`."""

from __future__ import annotations

import dataclasses
from typing import Callable

from anakin.config import AnakinConfig
from experiments.presets_common import ATARI_REPLAY, MINATAR_GAMES, atari_env, named, sebulba_twin, with_agent
from podracer.agents import PPOConfig
from podracer.config import Config, EnvConfig
from sebulba.config import SebulbaConfig

# Classic control.


def ppo_cartpole_anakin() -> Config:
    """PPO on CartPole-v1 with the CleanRL / PureJaxRL hyperparameters; learns in ~1 min on a CPU."""
    return Config(
        env=EnvConfig("CartPole-v1"),
        agent=PPOConfig(),
        arch=AnakinConfig(num_envs=4, rollout_length=128),
        total_env_steps=500_000,
    )


def ppo_catch_anakin() -> Config:
    """PPO on Catch, the Podracer paper's example: a perfect score (1.0) within 100k steps."""
    return Config(
        env=EnvConfig("Catch"),
        agent=PPOConfig(learning_rate=5e-4, anneal_lr=False, activation="relu"),
        arch=AnakinConfig(num_envs=32, rollout_length=16, updates_per_call=20),
        total_env_steps=100_000,
    )


def ppo_cartpole_sebulba() -> Config:
    """PPO on EnvPool's CartPole-v1 with the CleanRL classic-control hyperparameters.

    12 envs x 64 steps per update (768 transitions, as 6 x 128) split evenly over 1, 2 or 3
    learner devices, so the default device layout works on 1 to 4 devices.
    """
    return sebulba_twin(ppo_cartpole_anakin(), SebulbaConfig(num_envs=12, rollout_length=64))


# Atari (EnvPool), Sebulba.


def _atari_ppo(env_id: str) -> Config:
    """CleanRL's `ppo_atari_envpool.py`: 8 envs x 128 steps, 4 minibatches x 4 epochs,
    lr 2.5e-4 annealed, clip 0.1, entropy 0.01, Nature CNN shared by actor and critic,
    episodic life and reward clipping, 10M env steps.

    Sebulba's one departure from CleanRL: `max_policy_lag=1` (Cleanba's setting), so the
    actors collect the next rollout with the previous parameters while the learner updates
    (acting and learning overlap instead of taking turns). The clipped surrogate's ratio is
    taken against the behaviour policy's log-probabilities, as Cleanba's PPO does.

    On a CPU, `podracer train ppo-pong-sebulba --cpu-devices 3` (1 actor + 2 learner
    devices) keeps two cores busy: ~136 env steps/s on 2 cores against 85 on one device."""
    return Config(
        env=atari_env(env_id),
        agent=PPOConfig(
            learning_rate=2.5e-4, anneal_lr=True, num_epochs=4, num_minibatches=4, gamma=0.99,
            gae_lambda=0.95, clip_eps=0.1, clip_value=True, entropy_coef=0.01, value_coef=0.5,
            max_grad_norm=0.5, torso="nature_cnn", shared_torso=True, unroll_sgd=True,
        ),
        arch=SebulbaConfig(num_envs=8, rollout_length=128, max_policy_lag=1, updates_per_log=1),
        total_env_steps=10_000_000,
    )


def ppo_pong_sebulba() -> Config:
    """PPO on Pong (EnvPool Atari v5); see `_atari_ppo`."""
    return _atari_ppo("Pong-v5")


def ppo_breakout_sebulba() -> Config:
    """PPO on Breakout (EnvPool Atari v5); see `_atari_ppo`."""
    return _atari_ppo("Breakout-v5")


def ppo_pong_sebulba_fast() -> Config:
    """PPO on Pong for throughput on a many-core host with one accelerator: Cleanba's batch
    (128 envs x 128 steps, 4 minibatches x 4 epochs) with CleanRL's learning rate, clipping
    and Nature CNN, actors one version behind, and the actor layout measured and chosen for
    the host (`--arch.layout auto`)."""
    # CleanRL `ppo_atari_envpool.py`: lr 2.5e-4 annealed, 4 minibatches, 4 epochs, clip 0.1,
    # entropy 0.01, value 0.5, gradient norm 0.5 (as `_atari_ppo`). Cleanba `cleanba_ppo.py`
    # (and its `..._naturecnn.py` variant): the same optimisation over `local_num_envs=64` x
    # `num_actor_threads=2` = 128 envs per actor device x `num_steps=128`; minibatches of 4096.
    base = _atari_ppo("Pong-v5")
    return dataclasses.replace(base, arch=SebulbaConfig(num_envs=128, rollout_length=128, max_policy_lag=1,
                                                        updates_per_log=1, layout="auto"))


# V-trace advantages (for actors that lag behind the learner).


def _with_vtrace(base: Config) -> Config:
    return with_agent(base, advantage="vtrace")


def ppo_vtrace_cartpole_anakin() -> Config:
    """PPO with V-trace advantages on CartPole-v1 (on-policy under Anakin: a check that the
    V-trace path learns as well as GAE)."""
    return _with_vtrace(ppo_cartpole_anakin())


def ppo_vtrace_pong_sebulba() -> Config:
    """`ppo-pong-sebulba` with V-trace advantages and actors one version behind."""
    return _with_vtrace(ppo_pong_sebulba())  # whose actors already lag one version


def ppo_vtrace_replay_pong_sebulba() -> Config:
    """`ppo-vtrace-pong-sebulba` with half of each update's sequences replayed from a 20k-step
    buffer per learner device (as `impala-replay-pong-sebulba`)."""
    return with_agent(ppo_vtrace_pong_sebulba(), **ATARI_REPLAY)


# Continuous control: a Gaussian policy, observation normalisation and reward scaling,
# after CleanRL's `ppo_continuous_action.py`.


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


def _continuous_anakin(env_id: str, total_env_steps: int) -> Config:
    """`continuous_ppo` under Anakin: 16 envs x 128 steps per update, 8 updates per call."""
    return Config(
        env=EnvConfig(env_id),
        agent=continuous_ppo(),
        arch=AnakinConfig(num_envs=16, rollout_length=128, updates_per_call=8),
        total_env_steps=total_env_steps,
    )


def ppo_pendulum_anakin() -> Config:
    """PPO on gymnax Pendulum-v1 with CleanRL's continuous settings (16 envs x 128 steps)."""
    return _continuous_anakin("Pendulum-v1", 1_000_000)


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
    return _continuous_anakin("brax/inverted_pendulum", 300_000)


# MinAtar (gymnax's four games): `[10, 10, C]` boolean grids as float32, 10M env steps per
# run as the published baselines; `podracer bench table` trains them over seeds and compares.


# Where gymnax-blines' 5e-4 fell short of their published returns, a learning rate measured
# to reach them (4 seeds in one program, `podracer bench table`; README's MinAtar table):
# at 1e-3 Breakout-MinAtar evaluates 31.8 +- 6.8 at 5.1M env steps (5e-4: 19.2 +- 1.2,
# published 22.0), Asterix-MinAtar 15.1 +- 0.7 at 10M (5e-4: 13.4 +- 1.5, published 15.0).
GYMNAX_BLINES_LEARNING_RATE = 5e-4
MINATAR_PPO_LEARNING_RATES = {"Breakout-MinAtar": 1e-3, "Asterix-MinAtar": 1e-3}


def ppo_minatar(env_id: str, learning_rate: float | None = None) -> Config:
    """PPO with gymnax-blines' MinAtar settings (RobertTLange/gymnax-blines,
    `agents/<game>/ppo.yaml` and `utils/ppo.py`): 64 envs x 128 steps, 4 epochs x 8
    minibatches, gamma 0.999, GAE lambda 0.95, clip 0.2 (also on the value), Adam (eps 1e-5)
    at a constant 5e-4, gradient norm 0.5, entropy 0.01, value 0.5, advantages normalised
    per minibatch, separate actor and critic MLPs of 2 x 256 ReLU on the flattened grid.
    Departures: a truncated episode bootstraps from its final observation (gymnax-blines
    treats the time limit as a termination); the learning rate of the games in
    `MINATAR_PPO_LEARNING_RATES` (`learning_rate`, when given, replaces either)."""
    if learning_rate is None:
        learning_rate = MINATAR_PPO_LEARNING_RATES.get(env_id, GYMNAX_BLINES_LEARNING_RATE)
    return Config(
        env=EnvConfig(env_id),
        agent=PPOConfig(
            learning_rate=learning_rate, anneal_lr=False, num_epochs=4, num_minibatches=8, gamma=0.999, gae_lambda=0.95,
            clip_eps=0.2, clip_value=True, entropy_coef=0.01, value_coef=0.5, max_grad_norm=0.5, adam_eps=1e-5,
            normalize_advantages=True, torso="mlp", hidden_sizes=(256, 256), activation="relu", shared_torso=False,
        ),
        arch=AnakinConfig(num_envs=64, rollout_length=128, updates_per_call=8),
        total_env_steps=10_000_000,
    )


def ppo_vtrace_replay_minatar(env_id: str) -> Config:
    """PPO with V-trace and replay on MinAtar under Anakin: `ppo-*-minatar-anakin` with
    gymnax-blines' settings throughout (learning rate 5e-4, as the IMPALA presets it is
    compared with), V-trace advantages (lambda 0.95) and half of each update replayed."""
    base = ppo_minatar(env_id, learning_rate=GYMNAX_BLINES_LEARNING_RATE)
    return dataclasses.replace(base, agent=dataclasses.replace(
        base.agent, advantage="vtrace", vtrace_lambda=0.95, replay_fraction=0.5, replay_capacity=100_000))


# Partial observability: recurrent PPO (an LSTM core) beside its feed-forward twin, the same
# budget and settings but the core.


def _memory_ppo(core: str, activation: str = "tanh") -> PPOConfig:
    """PPO with a 64-unit core (or none) after a 64-unit torso, lr 1e-3 annealed, 4 epochs x
    4 minibatches (of whole sequences, with a core)."""
    return PPOConfig(learning_rate=1e-3, anneal_lr=True, num_epochs=4, num_minibatches=4, hidden_sizes=(64,),
                     core=core, core_size=64, activation=activation)


def ppo_lstm_memory_chain_anakin() -> Config:
    """PPO with an LSTM on bsuite's MemoryChain (gymnax) with a memory length of 10: the
    context (+-1) is shown at the first step only, and the 11th step's action is rewarded +1
    if it matches it, -1 if not. Feed-forward agents score 0 on average; this one reaches 1.0
    within ~100k env steps (300k budget, ~40 s on a CPU)."""
    return Config(
        env=EnvConfig("MemoryChain-bsuite", params=("memory_length=10",)),
        agent=_memory_ppo("lstm", "relu"),
        arch=AnakinConfig(num_envs=32, rollout_length=22, updates_per_call=10),
        total_env_steps=300_000,
    )


def ppo_memory_chain_anakin() -> Config:
    """`ppo-lstm-memory-chain-anakin`'s feed-forward twin (no core): the comparison's baseline."""
    return dataclasses.replace(ppo_lstm_memory_chain_anakin(), agent=_memory_ppo("none", "relu"))


def ppo_lstm_masked_cartpole_anakin() -> Config:
    """PPO with an LSTM on gymnax CartPole-v1 showing only the cart position and pole angle
    (`--env.observe 0,2`): the velocities must be inferred from memory. 16 envs x 128 steps,
    1M env steps, lr 3e-3 annealed; solved (500) from about 600k env steps, where the
    feed-forward twin (lr 1e-3) stays near 50. The learning rate is the best of 3e-4, 1e-3
    and 3e-3 by IQM over the partially observed classic-control family at 300k env steps
    (docs/benchmarks/classic-control.md), where the LSTM does not yet learn the masked
    Acrobot or MountainCar."""
    return Config(
        env=EnvConfig("CartPole-v1", observe=(0, 2)),
        agent=dataclasses.replace(_memory_ppo("lstm"), learning_rate=3e-3),
        arch=AnakinConfig(num_envs=16, rollout_length=128, updates_per_call=10),
        total_env_steps=1_000_000,
    )


def ppo_masked_cartpole_anakin() -> Config:
    """`ppo-lstm-masked-cartpole-anakin`'s feed-forward twin (no core, lr 1e-3)."""
    return dataclasses.replace(ppo_lstm_masked_cartpole_anakin(), agent=_memory_ppo("none"))


def ppo_lstm_masked_cartpole_sebulba() -> Config:
    """`ppo-lstm-masked-cartpole-anakin` on EnvPool's CartPole-v1 under Sebulba: 16 envs x
    128 steps (whole sequences split over 1, 2 or 4 learner devices), each actor keeping
    its environments' core states across rollouts."""
    return sebulba_twin(ppo_lstm_masked_cartpole_anakin(), SebulbaConfig(num_envs=16, rollout_length=128))


def ppo_masked_cartpole_sebulba() -> Config:
    """`ppo-lstm-masked-cartpole-sebulba`'s feed-forward twin (no core)."""
    return dataclasses.replace(ppo_lstm_masked_cartpole_sebulba(), agent=_memory_ppo("none"))


PPO_PRESETS: dict[str, Callable[[], Config]] = {
    "ppo-cartpole-anakin": ppo_cartpole_anakin,
    "ppo-catch-anakin": ppo_catch_anakin,
    "ppo-vtrace-cartpole-anakin": ppo_vtrace_cartpole_anakin,
    "ppo-pendulum-anakin": ppo_pendulum_anakin,
    "ppo-inverted-pendulum-brax-anakin": ppo_inverted_pendulum_brax_anakin,
    **{f"ppo-{game}-minatar-anakin": named(
        ppo_minatar, env_id, f"PPO on {env_id}, gymnax-blines' settings (2x256 MLP), lr "
        f"{ppo_minatar(env_id).agent.learning_rate:g}, 10M env steps")
       for game, env_id in MINATAR_GAMES.items()},
    **{f"ppo-vtrace-replay-{game}-minatar-anakin": named(
        ppo_vtrace_replay_minatar, env_id, f"PPO with V-trace on {env_id}, half of each update replayed, 10M env steps")
       for game, env_id in MINATAR_GAMES.items() if game in ("breakout", "space-invaders")},
    "ppo-cartpole-sebulba": ppo_cartpole_sebulba,
    "ppo-pong-sebulba": ppo_pong_sebulba,
    "ppo-pong-sebulba-fast": ppo_pong_sebulba_fast,
    "ppo-breakout-sebulba": ppo_breakout_sebulba,
    "ppo-vtrace-pong-sebulba": ppo_vtrace_pong_sebulba,
    "ppo-vtrace-replay-pong-sebulba": ppo_vtrace_replay_pong_sebulba,
    "ppo-halfcheetah-sebulba": ppo_halfcheetah_sebulba,
    "ppo-lstm-memory-chain-anakin": ppo_lstm_memory_chain_anakin,
    "ppo-memory-chain-anakin": ppo_memory_chain_anakin,
    "ppo-lstm-masked-cartpole-anakin": ppo_lstm_masked_cartpole_anakin,
    "ppo-masked-cartpole-anakin": ppo_masked_cartpole_anakin,
    "ppo-lstm-masked-cartpole-sebulba": ppo_lstm_masked_cartpole_sebulba,
    "ppo-masked-cartpole-sebulba": ppo_masked_cartpole_sebulba,
}
