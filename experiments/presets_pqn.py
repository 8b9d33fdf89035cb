"""Named presets for PQN on both architectures: classic control and MinAtar; merged into
`PRESETS` by `experiments.presets`."""

from __future__ import annotations

from typing import Callable

from anakin.config import AnakinConfig
from experiments.presets_common import MINATAR_GAMES, named, sebulba_twin
from podracer.agents import PQNConfig
from podracer.config import Config, EnvConfig
from sebulba.config import SebulbaConfig


def pqn_cartpole_anakin() -> Config:
    """PQN on CartPole-v1 with purejaxql's settings: 32 envs x 64 steps, 4 epochs x 16
    minibatches, RAdam 1e-4 decayed, rewards x 0.1, Q(lambda) 0.95, epsilon 1 -> 0.2 over
    100k env steps, 2 x 256 LayerNorm MLP. Return ~460 (epsilon 0.2 in training) by 160k
    env steps, 500 greedy."""
    return Config(
        env=EnvConfig("CartPole-v1"),
        agent=PQNConfig(learning_rate=1e-4, num_epochs=4, num_minibatches=16, q_lambda=0.95, reward_scale=0.1,
                        epsilon_end=0.2, epsilon_decay_steps=100_000, hidden_sizes=(256, 256)),
        arch=AnakinConfig(num_envs=32, rollout_length=64, updates_per_call=20),
        total_env_steps=500_000,
    )


def pqn_catch_anakin() -> Config:
    """PQN on Catch: a return above 0.8 (with epsilon 0.05 in training) within ~15k env steps."""
    return Config(
        env=EnvConfig("Catch"),
        agent=PQNConfig(learning_rate=3e-3, anneal_lr=False, num_epochs=2, num_minibatches=4, q_lambda=0.65,
                        epsilon_end=0.05, epsilon_decay_steps=5_000, hidden_sizes=(64,)),
        arch=AnakinConfig(num_envs=32, rollout_length=8, updates_per_call=20),
        total_env_steps=50_000,
    )


def pqn_cartpole_sebulba() -> Config:
    """PQN on EnvPool's CartPole-v1 (`pqn-cartpole-anakin`'s settings): 48 envs x 64 steps,
    split evenly over 1 to 4 learner devices; actors one version ahead of the learner."""
    return sebulba_twin(
        pqn_cartpole_anakin(), SebulbaConfig(num_envs=48, rollout_length=64, max_policy_lag=1, updates_per_log=10)
    )


# MinAtar (gymnax's four games): `[10, 10, C]` boolean grids as float32, 10M env steps per
# run as the published baselines; `podracer bench table` trains them over seeds and compares.


def pqn_minatar(env_id: str) -> Config:
    """PQN with the paper's MinAtar settings (purejaxql `config/alg/pqn_minatar.yaml`,
    `pqn_minatar.py`): 128 envs x 32 steps, 2 epochs x 32 minibatches, RAdam at 5e-4
    decayed linearly to 0, gradient norm 10, gamma 0.99, Q(lambda) 0.65, epsilon 1 -> 0.05
    over the first 10% of the run (1M env steps), the MinAtar CNN (16 3x3 filters, Dense
    128) with LayerNorm. Departures: the grid enters the network as it is (purejaxql
    divides it by 255, a leftover of its Atari script), and truncations bootstrap."""
    return Config(
        env=EnvConfig(env_id),
        agent=PQNConfig(
            learning_rate=5e-4, anneal_lr=True, optimizer="radam", max_grad_norm=10.0, num_epochs=2,
            num_minibatches=32, gamma=0.99, q_lambda=0.65, epsilon_start=1.0, epsilon_end=0.05,
            epsilon_decay_steps=1_000_000, torso="minatar_cnn", hidden_sizes=(128,), activation="relu",
            layer_norm=True,
        ),
        arch=AnakinConfig(num_envs=128, rollout_length=32, updates_per_call=16),
        total_env_steps=10_000_000,
    )


PQN_PRESETS: dict[str, Callable[[], Config]] = {
    "pqn-cartpole-anakin": pqn_cartpole_anakin,
    "pqn-catch-anakin": pqn_catch_anakin,
    **{f"pqn-{game}-minatar-anakin": named(
        pqn_minatar, env_id, f"PQN on {env_id}, the paper's settings (LayerNorm CNN), 10M env steps")
       for game, env_id in MINATAR_GAMES.items()},
    "pqn-cartpole-sebulba": pqn_cartpole_sebulba,
}
