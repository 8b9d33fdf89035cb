"""SAC's and TD3's hyperparameters: frozen dataclasses validated when built.

Both share the replay fields of `ReplayActorCriticConfig` (DQN's meanings: per learner
device, `replay_ratio` or `gradient_steps`, `learning_starts`, `n_step`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from podracer.config import check
from podracer.types import BatchShape

TORSOS = ("mlp", "simba")
SAMPLING = ("uniform", "stratified")
CRITICS = ("twin", "crossq", "distributional")


@dataclasses.dataclass(frozen=True)
class ReplayActorCriticConfig:
    """The fields SAC and TD3 share: networks, optimisers, replay.

    Replay is per learner device: each device holds `buffer_size` transitions and samples
    `batch_size` of them per gradient step (the global batch is `batch_size * devices`).
    Without `replay_ratio` an update of `T * B` transitions per device takes
    `gradient_steps` gradient steps; with it, it earns `replay_ratio * T * B / batch_size`
    steps of credit, takes the whole ones and carries the fraction (DQN's rule).
    """

    actor_learning_rate: float = 3e-4  # Adam step size of the actor
    critic_learning_rate: float = 1e-3  # Adam step size of the twin critics
    gamma: float = 0.99  # discount factor per env step
    n_step: int = 1  # rewards summed before bootstrapping (fewer only where an episode ended)
    tau: float = 0.005  # Polyak averaging of the target networks per update of them (1: hard copy)
    buffer_size: int = 1_000_000  # transitions held per device
    batch_size: int = 256  # transitions sampled per device per gradient step
    gradient_steps: int = 1  # gradient steps per update (per T * B transitions); ignored if replay_ratio is set
    replay_ratio: float | None = None  # samples learned per env step; None: use gradient_steps
    learning_starts: int = 5_000  # env steps (all devices, one seed) of uniform random actions before learning
    # how a batch is drawn: "uniform" with replacement, or "stratified": one item from each
    # of batch_size equal slices of the buffer (a lower-variance uniform sample; the
    # contract suite's exact 1-vs-4-device check uses it)
    sampling: Literal["uniform", "stratified"] = "uniform"
    # network body of actor and critics: "mlp" (ReLU layers of hidden_sizes), or "simba":
    # SimBa's residual pre-LayerNorm blocks (Lee et al. 2024, arXiv 2410.09754) of width
    # hidden_sizes[0], simba_blocks of them, and a final LayerNorm
    torso: Literal["mlp", "simba"] = "mlp"
    hidden_sizes: tuple[int, ...] = (256, 256)  # MLP widths (torso mlp); hidden_sizes[0] is SimBa's width
    simba_blocks: int = 2  # residual blocks of the simba torso (Lee et al. 2024: 1 for the actor, 2 critic)
    adam_b1: float = 0.9  # Adam's first-moment decay of the actor's and critics' optimisers (CrossQ: 0.5)
    # the critics (`podracer.agents.continuous.critics`): "twin": two Q networks and their
    # Polyak-averaged targets, clipped double Q; "crossq": CrossQ's (Bhatt et al. 2024, arXiv
    # 1902.05605): Batch Renormalization layers in an mlp of hidden_sizes, no target networks,
    # current and next batch in one forward pass; "distributional": FastTD3's (Seo et al. 2025,
    # arXiv 2505.22642) twin C51 critics (Bellemare et al. 2017) over num_atoms atoms in
    # [v_min, v_max], the twin with the lower expected value forming the target
    critic: Literal["twin", "crossq", "distributional"] = "twin"
    num_atoms: int = 101  # atoms of the distributional critic's support (FastTD3: 101)
    v_min: float = -10.0  # the distributional critic's lowest atom (returns below are clipped to it)
    v_max: float = 10.0  # its highest atom
    renorm_momentum: float = 0.99  # CrossQ: decay of Batch Renormalization's running statistics
    renorm_warmup: int = 100_000  # CrossQ: gradient steps of plain batch norm before renormalising

    def __post_init__(self) -> None:
        for name in ("actor_learning_rate", "critic_learning_rate", "buffer_size", "batch_size", "gradient_steps",
                     "n_step", "simba_blocks"):
            check(getattr(self, name) > 0, f"agent.{name}", "must be > 0", getattr(self, name))
        check(self.replay_ratio is None or self.replay_ratio > 0, "agent.replay_ratio",
              "must be > 0 (or None to take agent.gradient_steps per update)", self.replay_ratio)
        check(0 <= self.gamma <= 1, "agent.gamma", "must be in [0, 1]", self.gamma)
        check(0 < self.tau <= 1, "agent.tau", "must be in (0, 1]", self.tau)
        check(self.batch_size <= self.buffer_size, "agent.batch_size",
              f"must be <= agent.buffer_size ({self.buffer_size})", self.batch_size)
        check(self.learning_starts >= 0, "agent.learning_starts", "must be >= 0", self.learning_starts)
        check(self.sampling in SAMPLING, "agent.sampling", f"must be one of {SAMPLING}", self.sampling)
        check(self.torso in TORSOS, "agent.torso", f"must be one of {TORSOS}", self.torso)
        check(len(self.hidden_sizes) > 0 and min(self.hidden_sizes) > 0, "agent.hidden_sizes",
              "must be positive sizes", self.hidden_sizes)
        check(0 <= self.adam_b1 < 1, "agent.adam_b1", "must be in [0, 1)", self.adam_b1)
        check(self.critic in CRITICS, "agent.critic", f"must be one of {CRITICS}", self.critic)
        check(self.critic != "crossq" or self.torso == "mlp", "agent.torso",
              "must be mlp with agent.critic crossq (its critic is an mlp with Batch Renormalization)", self.torso)
        check(self.num_atoms >= 2, "agent.num_atoms", "must be >= 2", self.num_atoms)
        check(math.isfinite(self.v_max), "agent.v_max", "must be finite", self.v_max)
        check(self.v_min < self.v_max, "agent.v_min", f"must be < agent.v_max ({self.v_max})", self.v_min)
        check(0 <= self.renorm_momentum < 1, "agent.renorm_momentum", "must be in [0, 1)", self.renorm_momentum)
        check(self.renorm_warmup >= 0, "agent.renorm_warmup", "must be >= 0", self.renorm_warmup)

    def steps_per_update(self, per_device_batch: int) -> float:
        """Gradient steps one update of `per_device_batch` (T * B per device) transitions
        earns: `gradient_steps`, or `replay_ratio * per_device_batch / batch_size`."""
        if self.replay_ratio is None:
            return float(self.gradient_steps)
        return self.replay_ratio * per_device_batch / self.batch_size

    def max_steps_per_update(self, per_device_batch: int) -> int:
        """The static cap on one update's gradient steps, `ceil(steps_per_update)`."""
        return max(1, math.ceil(self.steps_per_update(per_device_batch)))

    def check_batch(self, batch: BatchShape) -> None:
        """The newest `n_step - 1` steps per environment wait in the buffer for their
        successors: `n_step` updates' steps must fit in a device's buffer."""
        need = self.n_step * batch.transitions
        check(self.buffer_size >= need, "agent.buffer_size",
              f"must hold agent.n_step ({self.n_step}) updates' steps per device ({need})", self.buffer_size)


@dataclasses.dataclass(frozen=True)
class SACConfig(ReplayActorCriticConfig):
    """Soft Actor-Critic (Haarnoja et al. 2018, arXiv 1812.05905) with automatic entropy
    temperature; defaults are CleanRL's `sac_continuous_action` (MuJoCo)."""

    temperature_learning_rate: float = 1e-3  # Adam step size of log(alpha)
    initial_temperature: float = 1.0  # alpha when the run starts (0 with autotune off: no entropy bonus)
    autotune: bool = True  # learn alpha against target_entropy (eq. 18); False keeps initial_temperature
    target_entropy: float | None = None  # the entropy alpha holds the policy to; None: -|A| (the paper's)
    log_std_min: float = -5.0  # the lower bound of the policy's log-std (squashed into [min, max])
    log_std_max: float = 2.0  # the upper bound of the policy's log-std
    policy_delay: int = 1  # gradient steps per actor and temperature step (1: every step)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.temperature_learning_rate > 0, "agent.temperature_learning_rate", "must be > 0",
              self.temperature_learning_rate)
        check(self.initial_temperature >= 0 and (self.initial_temperature > 0 or not self.autotune),
              "agent.initial_temperature", "must be >= 0 (> 0 with agent.autotune)", self.initial_temperature)
        check(self.target_entropy is None or math.isfinite(self.target_entropy), "agent.target_entropy",
              "must be finite (or None for -|A|)", self.target_entropy)
        check(math.isfinite(self.log_std_max), "agent.log_std_max", "must be finite", self.log_std_max)
        check(self.log_std_min < self.log_std_max, "agent.log_std_min",
              f"must be < agent.log_std_max ({self.log_std_max})", self.log_std_min)
        check(self.policy_delay > 0, "agent.policy_delay", "must be > 0", self.policy_delay)


@dataclasses.dataclass(frozen=True)
class TD3Config(ReplayActorCriticConfig):
    """Twin Delayed DDPG (Fujimoto et al. 2018, arXiv 1802.09477); defaults are CleanRL's
    `td3_continuous_action`. Noise scales are in units of the box's half-width."""

    actor_learning_rate: float = 3e-4
    critic_learning_rate: float = 3e-4
    exploration_noise: float = 0.1  # std of the Gaussian added to the actor's action when acting
    target_noise: float = 0.2  # std of target policy smoothing's noise (eq. 14)
    target_noise_clip: float = 0.5  # smoothing's noise is clipped to +-target_noise_clip
    policy_delay: int = 2  # gradient steps per actor and target-network update (d in alg. 1)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("exploration_noise", "target_noise", "target_noise_clip"):
            check(getattr(self, name) >= 0, f"agent.{name}", "must be >= 0", getattr(self, name))
        check(self.policy_delay > 0, "agent.policy_delay", "must be > 0", self.policy_delay)
