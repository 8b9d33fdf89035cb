"""MuZero's hyperparameters: a frozen dataclass validated when built."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from podracer.config import check
from podracer.replay.sequence import max_capacity
from podracer.types import BatchShape

SEARCHES = ("gumbel", "muzero")
MUZERO_TORSOS = ("mlp", "conv")


@dataclasses.dataclass(frozen=True)
class MuZeroConfig:
    """MuZero (Schrittwieser et al. 2020) acting with mctx's search; defaults suit classic
    control on a CPU (small networks, few simulations: Gumbel MuZero, Danihelka et al. 2022).

    Replay is per learner device: each holds `buffer_size` steps and samples `batch_size`
    sequences of `sequence_length = unroll_steps + td_steps + 1` steps per gradient step
    (global batch: `batch_size * devices`). `replay_ratio` is the number of sequences
    learned per env step: each update of `T * B` steps per device earns
    `replay_ratio * T * B / batch_size` gradient steps, takes the whole ones (at most
    `max_steps_per_update`) and carries the fraction, as DQN does; with `replay_ratio=None`
    it takes `gradient_steps` per update.
    """

    # Search (acting).
    search: Literal["gumbel", "muzero"] = "gumbel"  # mctx.gumbel_muzero_policy or mctx.muzero_policy
    num_simulations: int = 8  # simulations per search (per acting step)
    max_num_considered_actions: int = 16  # gumbel: actions sampled without replacement at the root
    gumbel_scale: float = 1.0  # gumbel: scale of the root's Gumbel noise; 0 acts deterministically
    dirichlet_alpha: float = 0.3  # muzero: concentration of the root's Dirichlet exploration noise
    dirichlet_fraction: float = 0.25  # muzero: weight of the Dirichlet noise in the root's prior
    temperature: float = 1.0  # muzero: actions sampled from visit counts ** (1 / temperature)
    # Q-values are min-max normalised per node over a range of at least `min_q_range` (mctx's
    # epsilon; in value units): a floor keeps noise-level differences between the actions of
    # an untrained model from becoming full-scale preferences. mctx's default: 1e-8.
    min_q_range: float = 1e-8  # floor of the range Q-values are min-max normalised over (value units)
    # Model.
    torso: Literal["mlp", "conv"] = "mlp"  # representation torso; "conv": a small CNN for grid observations
    hidden_sizes: tuple[int, ...] = (64,)  # representation torso (mlp), and after the convolutions (conv)
    conv_channels: tuple[int, ...] = (16, 16)  # conv: 3x3 convolutions, stride 1
    latent_size: int = 64  # the model's state: a vector, min-max normalised to [0, 1]
    dynamics_hidden_sizes: tuple[int, ...] = (64,)  # MLP of the dynamics (state, one-hot action) -> next state, reward
    prediction_hidden_sizes: tuple[int, ...] = (64,)  # MLP of the prediction state -> policy, value
    activation: Literal["tanh", "relu", "gelu"] = "relu"  # of every torso
    # Values and rewards: categorical over `num_bins` points evenly spaced on the transformed
    # scale h(x) between h(-value_max) and h(value_max); beyond value_max they are clipped.
    value_max: float = 100.0  # largest |value| or |reward| the categorical support represents
    num_bins: int = 51  # points of the categorical support (odd: one at 0)
    # Learning.
    gamma: float = 0.99  # discount, in the search and in the value targets
    unroll_steps: int = 5  # K: model steps unrolled in the loss
    td_steps: int = 10  # n: rewards summed before bootstrapping from a search value
    learning_rate: float = 1e-3  # AdamW's step size
    anneal_lr: bool = False  # decay the learning rate linearly to 0 over the run's env steps
    adam_eps: float = 1e-8  # AdamW's epsilon
    weight_decay: float = 1e-4  # AdamW's decoupled weight decay
    max_grad_norm: float = 5.0  # global-norm gradient clipping
    value_coef: float = 0.25  # MuZero Reanalyse's value-loss weight
    policy_coef: float = 1.0  # weight of the policy loss (cross-entropy to the search policy)
    reward_coef: float = 1.0  # weight of the reward loss
    dynamics_gradient_scale: float = 0.5  # gradient into each dynamics step (the paper's 1/2)
    absorbing_terminal: bool = True  # past a termination: value and reward targets 0 (else masked)
    # Replay.
    buffer_size: int = 100_000  # steps held per device
    batch_size: int = 128  # sequences per device per gradient step
    gradient_steps: int = 1  # per update (per rollout of T * B steps); ignored if replay_ratio is set
    replay_ratio: float | None = 0.25  # sequences learned per env step; None: use gradient_steps
    learning_starts: int = 1_000  # env steps (all devices, one seed) before the first gradient step

    def __post_init__(self) -> None:
        check(self.search in SEARCHES, "agent.search", f"must be one of {SEARCHES}", self.search)
        positive = ("num_simulations", "max_num_considered_actions", "temperature", "min_q_range", "latent_size",
                    "value_max", "unroll_steps", "td_steps", "learning_rate", "adam_eps", "max_grad_norm",
                    "buffer_size", "batch_size", "gradient_steps")
        for name in positive:
            check(getattr(self, name) > 0, f"agent.{name}", "must be > 0", getattr(self, name))
        check(self.replay_ratio is None or self.replay_ratio > 0, "agent.replay_ratio",
              "must be > 0 (or None to take agent.gradient_steps per update)", self.replay_ratio)
        for name in ("gumbel_scale", "dirichlet_alpha", "weight_decay", "value_coef", "policy_coef",
                     "reward_coef", "learning_starts"):
            check(getattr(self, name) >= 0, f"agent.{name}", "must be >= 0", getattr(self, name))
        for name in ("dirichlet_fraction", "gamma"):
            check(0 <= getattr(self, name) <= 1, f"agent.{name}", "must be in [0, 1]", getattr(self, name))
        check(0 < self.dynamics_gradient_scale <= 1, "agent.dynamics_gradient_scale", "must be in (0, 1]",
              self.dynamics_gradient_scale)
        check(self.torso in MUZERO_TORSOS, "agent.torso", f"must be one of {MUZERO_TORSOS}", self.torso)
        check(self.activation in ("tanh", "relu", "gelu"), "agent.activation",
              "must be one of ('tanh', 'relu', 'gelu')", self.activation)
        for name in ("hidden_sizes", "conv_channels", "dynamics_hidden_sizes", "prediction_hidden_sizes"):
            sizes = getattr(self, name)
            check(len(sizes) > 0 and min(sizes) > 0, f"agent.{name}", "must be positive sizes", sizes)
        check(self.num_bins >= 3 and self.num_bins % 2 == 1, "agent.num_bins",
              "must be odd and >= 3 (a bin at 0)", self.num_bins)
        check(self.batch_size <= self.buffer_size, "agent.batch_size",
              f"must be <= agent.buffer_size ({self.buffer_size})", self.batch_size)
        check(self.buffer_size <= max_capacity(self.batch_size), "agent.buffer_size",
              f"must be <= {max_capacity(self.batch_size)} to sample {self.batch_size} sequences exactly "
              "(podracer.replay.sequence.max_capacity)", self.buffer_size)

    @property
    def sequence_length(self) -> int:
        """Steps per sampled sequence: the root, K unrolled steps and n steps of rewards past the last."""
        return self.unroll_steps + self.td_steps + 1

    def steps_per_update(self, per_device_batch: int) -> float:
        """Gradient steps one update of `per_device_batch` (T * B) steps per device earns:
        `gradient_steps`, or `replay_ratio * per_device_batch / batch_size`."""
        if self.replay_ratio is None:
            return float(self.gradient_steps)
        return self.replay_ratio * per_device_batch / self.batch_size

    def max_steps_per_update(self, per_device_batch: int) -> int:
        """The static cap on gradient steps in one update: `ceil(steps_per_update)`."""
        return max(1, math.ceil(self.steps_per_update(per_device_batch)))

    def check_batch(self, batch: BatchShape) -> None:
        """A device's buffer must hold `sequence_length` updates of `T * B` steps, and each
        environment's next observation (the buffer's lookahead): enough for one add and for a
        whole sequence of any of its environments."""
        need = self.sequence_length * batch.transitions + batch.envs_per_device
        check(self.buffer_size >= need, "agent.buffer_size", f"must hold agent.sequence_length "
              f"({self.sequence_length}) updates of {batch.transitions} steps per device and the next observation "
              f"of each of its {batch.envs_per_device} environments ({need})", self.buffer_size)
