"""MinAtar presets (gymnax's four games) for PPO and PQN under Anakin.

Observations are `[10, 10, C]` boolean grids (as float32). 10M env steps per run, as the
published baselines; `podracer bench table` trains them over seeds and compares.
"""

from __future__ import annotations

from typing import Callable

from anakin.config import AnakinConfig
from podracer.agents import PPOConfig, PQNConfig
from podracer.config import Config, EnvConfig

# preset game name -> gymnax id
MINATAR_GAMES = {
    "breakout": "Breakout-MinAtar",
    "space-invaders": "SpaceInvaders-MinAtar",
    "freeway": "Freeway-MinAtar",
    "asterix": "Asterix-MinAtar",
}


def ppo_minatar(env_id: str) -> Config:
    """PPO with gymnax-blines' MinAtar settings (RobertTLange/gymnax-blines,
    `agents/<game>/ppo.yaml` and `utils/ppo.py`): 64 envs x 128 steps, 4 epochs x 8
    minibatches, gamma 0.999, GAE lambda 0.95, clip 0.2 (also on the value), Adam (eps 1e-5)
    at a constant 5e-4, gradient norm 0.5, entropy 0.01, value 0.5, advantages normalised
    per minibatch, separate actor and critic MLPs of 2 x 256 ReLU on the flattened grid.
    Departure: a truncated episode bootstraps from its final observation (gymnax-blines
    treats the time limit as a termination)."""
    return Config(
        env=EnvConfig(env_id),
        agent=PPOConfig(
            learning_rate=5e-4, anneal_lr=False, num_epochs=4, num_minibatches=8, gamma=0.999, gae_lambda=0.95,
            clip_eps=0.2, clip_value=True, entropy_coef=0.01, value_coef=0.5, max_grad_norm=0.5, adam_eps=1e-5,
            normalize_advantages=True, torso="mlp", hidden_sizes=(256, 256), activation="relu", shared_torso=False,
        ),
        arch=AnakinConfig(num_envs=64, rollout_length=128, updates_per_call=8),
        total_env_steps=10_000_000,
    )


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


def _preset(make: Callable[[str], Config], env_id: str, doc: str) -> Callable[[], Config]:
    def preset() -> Config:
        return make(env_id)

    preset.__doc__ = doc
    return preset


MINATAR_PRESETS: dict[str, Callable[[], Config]] = {}
for _game, _env_id in MINATAR_GAMES.items():
    MINATAR_PRESETS[f"ppo-{_game}-minatar-anakin"] = _preset(
        ppo_minatar, _env_id, f"PPO on {_env_id}, gymnax-blines' settings (2x256 MLP), 10M env steps")
    MINATAR_PRESETS[f"pqn-{_game}-minatar-anakin"] = _preset(
        pqn_minatar, _env_id, f"PQN on {_env_id}, the paper's settings (LayerNorm CNN), 10M env steps")
