"""DQN's hyperparameters: a frozen dataclass validated when built."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from podracer.agents.networks import ACTIVATIONS, TORSOS
from podracer.config import check
from podracer.networks.registry import parse_torso_options, registered_torsos
from podracer.types import BatchShape


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """DQN hyperparameters; defaults suit classic control (CleanRL's CartPole DQN).

    Replay is per learner device: each device holds `buffer_size` transitions and samples
    `batch_size` of them per gradient step, so the global batch is `batch_size * devices`.
    Each `update` receives `T * B` transitions per device. Without `replay_ratio` it takes
    `gradient_steps` gradient steps, a replay ratio (samples learned per env step) of
    `gradient_steps * batch_size / (T * B_per_device)`. With `replay_ratio` set, that ratio
    is the knob and `gradient_steps` is ignored: each update earns
    `replay_ratio * T * B_per_device / batch_size` gradient steps of credit, takes the
    whole steps and carries the fraction to the next update (see `steps_per_update`).
    """

    learning_rate: float = 2.5e-4  # Adam step size, constant over the run
    adam_eps: float = 1e-5  # Adam's epsilon, added to the root of the second-moment estimate
    max_grad_norm: float = 10.0  # gradients are rescaled to at most this global L2 norm
    gamma: float = 0.99  # discount factor per env step
    n_step: int = 1  # rewards summed before bootstrapping (across rollouts; fewer only where an episode ended)
    # Double DQN: the online network picks the bootstrap action, the target network values it
    # (van Hasselt et al. 2016)
    double_q: bool = True
    loss: Literal["huber", "mse"] = "mse"  # TD loss: "mse" squared error, or "huber" (Mnih et al. 2015, Atari)
    huber_delta: float = 1.0  # loss huber: the |TD error| (in return units) where it turns linear
    buffer_size: int = 10_000  # transitions held per device
    batch_size: int = 128  # transitions sampled per device per gradient step
    gradient_steps: int = 1  # gradient steps per update (per T * B transitions); ignored if replay_ratio is set
    replay_ratio: float | None = None  # samples learned per env step; None: use gradient_steps
    learning_starts: int = 10_000  # env steps (all devices, one seed) before the first gradient step
    target_update_period: int = 500  # gradient steps between target-network updates
    target_update_tau: float = 1.0  # 1: hard copy (Mnih et al. 2015); < 1: Polyak averaging
    epsilon_start: float = 1.0  # epsilon-greedy: probability of a random action when the run starts
    epsilon_end: float = 0.05  # epsilon-greedy: probability of a random action from epsilon_decay_steps on
    epsilon_decay_steps: int = 250_000  # env steps (all devices, one seed) of linear decay
    # prioritized replay: sample by priority (|TD error| + priority_eps)^alpha, not uniformly
    # (Schaul et al. 2016)
    prioritized: bool = False
    priority_exponent: float = 0.6  # alpha of prioritized replay: 0 samples uniformly, 1 in proportion to priority
    # beta of prioritized replay's importance weights when learning starts, annealed
    # linearly to 1 at the run's end
    importance_exponent: float = 0.4
    priority_eps: float = 1e-6  # added to |TD error| so no transition gets priority 0
    unroll_sgd: bool = False  # unroll the gradient steps of an update (faster CNN updates on CPU, longer compile)
    # network body: "mlp" for vectors, "nature_cnn" or "impala_cnn" for pixels, or a torso
    # registered by name (`podracer.networks.registry.register_torso`; hidden_sizes/activation unused).
    # Dict/NamedTuple observations: "mlp" flattens and concatenates their fields,
    # "multi_encoder" gives each image-like field a convolution first.
    torso: str = "mlp"
    # a registered torso's options by name, e.g. blocks=2 channels=16 (`podracer.networks.registry`)
    torso_options: tuple[str, ...] = ()
    hidden_sizes: tuple[int, ...] = (120, 84)  # MLP layer widths (torso mlp)
    activation: Literal["tanh", "relu", "gelu"] = "relu"  # MLP activation (torso mlp)

    def __post_init__(self) -> None:
        positive = ("learning_rate", "adam_eps", "max_grad_norm", "huber_delta", "buffer_size", "batch_size",
                    "gradient_steps", "n_step", "target_update_period", "epsilon_decay_steps", "priority_eps")
        for name in positive:
            check(getattr(self, name) > 0, f"agent.{name}", "must be > 0", getattr(self, name))
        check(self.replay_ratio is None or self.replay_ratio > 0, "agent.replay_ratio",
              "must be > 0 (or None to take agent.gradient_steps per update)", self.replay_ratio)
        check(0 <= self.gamma <= 1, "agent.gamma", "must be in [0, 1]", self.gamma)
        check(self.loss in ("huber", "mse"), "agent.loss", "must be 'huber' or 'mse'", self.loss)
        check(self.batch_size <= self.buffer_size, "agent.batch_size", f"must be <= agent.buffer_size "
              f"({self.buffer_size})", self.batch_size)
        check(self.learning_starts >= 0, "agent.learning_starts", "must be >= 0", self.learning_starts)
        check(0 < self.target_update_tau <= 1, "agent.target_update_tau", "must be in (0, 1]",
              self.target_update_tau)
        for name in ("epsilon_start", "epsilon_end", "priority_exponent", "importance_exponent"):
            check(0 <= getattr(self, name) <= 1, f"agent.{name}", "must be in [0, 1]", getattr(self, name))
        registered = registered_torsos()
        torsos = TORSOS + tuple(registered)
        check(self.torso in torsos, "agent.torso", f"must be one of {torsos}", self.torso)
        if self.torso in registered:
            parse_torso_options(registered[self.torso], self.torso_options)
        check(not self.torso_options or self.torso in registered, "agent.torso_options",
              f"sets options of a registered torso; {self.torso!r} is built-in", self.torso_options)
        check(len(self.hidden_sizes) > 0 and min(self.hidden_sizes) > 0,
              "agent.hidden_sizes", "must be positive sizes", self.hidden_sizes)
        check(self.activation in ACTIVATIONS, "agent.activation", f"must be one of {ACTIVATIONS}",
              self.activation)

    def steps_per_update(self, per_device_batch: int) -> float:
        """Gradient steps one update earns when it brings `per_device_batch` (T * B per
        device) transitions: `gradient_steps`, or `replay_ratio * per_device_batch / batch_size`."""
        if self.replay_ratio is None:
            return float(self.gradient_steps)
        return self.replay_ratio * per_device_batch / self.batch_size

    def max_steps_per_update(self, per_device_batch: int) -> int:
        """The static cap on gradient steps in one update: `ceil(steps_per_update)`, the most
        one update can earn with a carried fraction below 1 (it binds only through float
        rounding, and then defers the step rather than dropping it)."""
        return max(1, math.ceil(self.steps_per_update(per_device_batch)))

    def check_batch(self, batch: BatchShape) -> None:
        """Each update adds `T * B` steps to a device's buffer, whose newest `n_step - 1`
        steps per environment wait for their successors: `n_step` updates' steps must fit."""
        need = self.n_step * batch.transitions
        check(self.buffer_size >= need, "agent.buffer_size",
              f"must hold agent.n_step ({self.n_step}) updates' steps per device ({need})", self.buffer_size)
