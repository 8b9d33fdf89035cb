"""IMPALA's V-trace actor-critic (Espeholt et al. 2018) as a podracer `Agent`.

The loss of the paper (section 4): a policy gradient with V-trace advantages, a baseline
regressed on V-trace targets, and an entropy bonus, over whole `[T, B]` sequences. The
behaviour policy's log-probabilities come from `act` (`extras["log_prob"]`), so the same
agent corrects for policy lag under Sebulba and is on-policy under Anakin. Gradients are
averaged over `axis_name` by `parallel.value_and_mean_grad`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Literal

import jax
import jax.numpy as jnp
import optax

from podracer import parallel
from podracer.agents.acting import CATEGORICAL
from podracer.agents.actor_critic import check_model_fields, make_actor_critic_model
from podracer.agents.minibatches import sequence_minibatches
from podracer.agents.networks import ACTIVATIONS, TORSOS
from podracer.agents.registry import Algorithm
from podracer.agents.schedules import learning_rate
from podracer.agents.sgd import make_init, make_sgd_epochs
from podracer.config import check
from podracer.ops import VTraceOutput, categorical_log_prob, entropy_loss, vtrace_td_error_and_advantage
from podracer.replay.mixing import check_replay, with_replay
from podracer.types import (
    Agent,
    AgentState,
    Array,
    BatchShape,
    DiscreteSpec,
    ObservationSpec,
    Params,
    PRNGKey,
    Trajectory,
)


@dataclasses.dataclass(frozen=True)
class ImpalaConfig:
    """IMPALA hyperparameters. Defaults: the paper's (Atari, table G.1) where they apply."""

    learning_rate: float = 6e-4  # optimizer step size
    anneal_lr: bool = True  # linear decay to 0 over the run (as in the paper)
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"  # RMSProp as the paper (TF1's), or Adam
    rmsprop_decay: float = 0.99  # RMSProp's decay of the mean square
    rmsprop_eps: float = 0.01  # RMSProp's epsilon, inside the square root as TensorFlow's (DMLab: 0.1)
    adam_eps: float = 1e-5  # Adam's epsilon (with optimizer adam)
    max_grad_norm: float = 40.0  # gradients are rescaled to at most this global L2 norm
    num_epochs: int = 1  # passes over each trajectory batch (IMPALA: 1)
    num_minibatches: int = 1  # minibatches per pass, per device; splits the environments, not time
    gamma: float = 0.99  # discount factor per env step
    vtrace_lambda: float = 1.0  # V-trace's lambda: 1 is the paper's, lower mixes in shorter returns
    clip_rho_threshold: float = 1.0  # V-trace's rho-bar: importance weights of the value targets clipped to it
    clip_pg_rho_threshold: float = 1.0  # V-trace's rho-bar of the policy-gradient advantage
    entropy_coef: float = 0.01  # weight of the entropy bonus
    value_coef: float = 0.5  # weight of the value loss (the paper's baseline cost)
    # network body: an MLP, or a CNN for pixels; dict/NamedTuple observations: "mlp" flattens and
    # concatenates their fields, "multi_encoder" gives each image-like field a convolution first
    torso: Literal["mlp", "nature_cnn", "impala_cnn", "multi_encoder"] = "mlp"
    hidden_sizes: tuple[int, ...] = (64, 64)  # MLP layer widths
    activation: Literal["tanh", "relu", "gelu"] = "tanh"  # MLP activation
    shared_torso: bool = False  # one body for policy and value (else two)
    unroll_sgd: bool = False  # unroll epochs and minibatches (faster CNN updates on CPU)
    replay_fraction: float = 0.0  # share of each update's sequences replayed from the device's buffer (0: none)
    replay_capacity: int = 100_000  # steps held by each learner device's sequence buffer (with replay)
    # A recurrent core between the torso and the heads ("lstm": the paper's agent, or "gru"),
    # reset at every episode start; or "none" (feed-forward).
    core: Literal["none", "lstm", "gru"] = "none"
    core_size: int = 256  # units of the recurrent core (the paper's LSTM: 256)
    # A compressed latent (RLDM 2019's auto-encoder): the torso feeds a Dense of latent_size
    # units that linear policy and value heads read alone, and a decoder reconstructs the
    # observation from it, trained jointly with the agent (0: no latent; needs shared_torso).
    latent_size: int = 0
    reconstruction_coef: float = 1.0  # weight of the reconstruction loss (with a latent)
    reconstruction: Literal["mse", "sigmoid_ce"] = "mse"  # squared error, or sigmoid cross-entropy for 0/1 grids

    def __post_init__(self) -> None:
        check(self.learning_rate > 0, "agent.learning_rate", "must be > 0", self.learning_rate)
        check(self.optimizer in ("rmsprop", "adam"), "agent.optimizer", "must be 'rmsprop' or 'adam'",
              self.optimizer)
        check(0 <= self.rmsprop_decay < 1, "agent.rmsprop_decay", "must be in [0, 1)", self.rmsprop_decay)
        check(self.rmsprop_eps > 0, "agent.rmsprop_eps", "must be > 0", self.rmsprop_eps)
        check(self.adam_eps > 0, "agent.adam_eps", "must be > 0", self.adam_eps)
        check(self.max_grad_norm > 0, "agent.max_grad_norm", "must be > 0", self.max_grad_norm)
        check(self.num_epochs >= 1, "agent.num_epochs", "must be >= 1", self.num_epochs)
        check(self.num_minibatches >= 1, "agent.num_minibatches", "must be >= 1", self.num_minibatches)
        check(0 <= self.gamma <= 1, "agent.gamma", "must be in [0, 1]", self.gamma)
        check(0 <= self.vtrace_lambda <= 1, "agent.vtrace_lambda", "must be in [0, 1]", self.vtrace_lambda)
        check(self.clip_rho_threshold > 0, "agent.clip_rho_threshold", "must be > 0", self.clip_rho_threshold)
        check(self.clip_pg_rho_threshold > 0, "agent.clip_pg_rho_threshold", "must be > 0",
              self.clip_pg_rho_threshold)
        check(self.entropy_coef >= 0, "agent.entropy_coef", "must be >= 0", self.entropy_coef)
        check(self.value_coef >= 0, "agent.value_coef", "must be >= 0", self.value_coef)
        check(self.torso in TORSOS, "agent.torso", f"must be one of {TORSOS}", self.torso)
        check(len(self.hidden_sizes) > 0 and min(self.hidden_sizes) > 0,
              "agent.hidden_sizes", "must be positive sizes", self.hidden_sizes)
        check(self.activation in ACTIVATIONS, "agent.activation", f"must be one of {ACTIVATIONS}",
              self.activation)
        check(0 <= self.replay_fraction < 1, "agent.replay_fraction", "must be in [0, 1)", self.replay_fraction)
        check(self.replay_capacity >= 1, "agent.replay_capacity", "must be >= 1", self.replay_capacity)
        check_model_fields(self)

    def check_batch(self, batch: BatchShape) -> None:
        """Raise ConfigError unless one device's `B` environments split into
        `num_minibatches` minibatches of whole sequences (the loss needs whole `[T]`
        sequences, so minibatches split the environments, not time)."""
        envs = batch.envs_per_device
        what = f"{envs} environments of each device"
        if self.replay_fraction > 0:
            replayed = check_replay(self.replay_fraction, self.replay_capacity, batch)
            envs, what = envs + replayed, f"{envs + replayed} sequences of each device's update ({envs} " \
                f"environments + {replayed} replayed)"
        check(envs % self.num_minibatches == 0, "agent.num_minibatches",
              f"must divide the {what} (minibatches are whole sequences)", self.num_minibatches)


def vtrace_on_trajectory(
    traj: Trajectory,
    value: Array,
    next_value: Array,
    log_prob: Array,
    gamma: float,
    lambda_: float,
    clip_rho_threshold: float,
    clip_pg_rho_threshold: float,
) -> VTraceOutput:
    """V-trace over a `[T, B]` trajectory (vmapped over B), each output `[T, B]`.

    value / next_value: `V(obs)` and `V(next_obs)` under the current parameters; log_prob:
    the current policy's `log pi(action|obs)`; the behaviour's is `traj.extras["log_prob"]`.
    Terminated steps do not bootstrap; terminated or truncated ones cut the trace, and a
    truncated one bootstraps from `V(next_obs)`, its final observation. No gradient flows
    through the importance ratios, `next_value` or the targets.
    """
    rho = jax.lax.stop_gradient(jnp.exp(log_prob - traj.extras["log_prob"]))
    discount = gamma * (1.0 - traj.terminated.astype(jnp.float32))
    end = traj.terminated | traj.truncated
    vtrace = jax.vmap(vtrace_td_error_and_advantage, in_axes=(1, 1, 1, 1, 1, None, None, None, None, 1),
                      out_axes=1)
    return vtrace(value, jax.lax.stop_gradient(next_value), traj.reward, discount, rho,
                  lambda_, clip_rho_threshold, clip_pg_rho_threshold, True, end)


def make_optimizer(config: ImpalaConfig, num_steps: int) -> optax.GradientTransformation:
    """Global-norm clipping then RMSProp (the paper's) or Adam, with optional linear decay.

    The paper's RMSProp is TensorFlow 1's `RMSPropOptimizer`: the mean square starts at 1
    (not 0) and epsilon is added inside the square root, `g / sqrt(ms + eps)`; optax's
    `initial_scale=1.0` and `eps_in_sqrt=True` give the same steps (from 0, the first steps
    would be up to `1 / sqrt(1 - decay)` = 10x larger)."""
    lr = learning_rate(config.learning_rate, config.anneal_lr, num_steps)
    if config.optimizer == "rmsprop":
        base = optax.rmsprop(lr, decay=config.rmsprop_decay, eps=config.rmsprop_eps, initial_scale=1.0,
                             eps_in_sqrt=True)
    else:
        base = optax.adam(lr, eps=config.adam_eps)
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), base)


def impala_loss(
    params: Params,
    outputs: Callable[[Params, Trajectory], tuple[Array, Array, Array, Array]],
    traj: Trajectory,
    config: ImpalaConfig,
) -> tuple[Array, dict[str, Array]]:
    """IMPALA's loss over whole sequences (Espeholt et al. 2018, section 4.2): the policy
    gradient with V-trace's advantages `rho_s (r_s + gamma v_{s+1} - V(x_s))`, plus
    `value_coef` times the baseline's `0.5 (v_s - V(x_s))^2`, minus `entropy_coef` times the
    entropy bonus, plus with a latent `reconstruction_coef` times the reconstruction loss.

    Args:
      params: the parameters differentiated.
      outputs: `(params, traj) -> (logits [T, B, A], V(obs) [T, B], V(next_obs) [T, B], aux)`,
        the model's `train_outputs`; `aux` is the scalar reconstruction loss (0 without a latent).
      traj: a `[T, B]` minibatch of whole sequences; `traj.extras["log_prob"]` is the
        behaviour policy's `log mu(a|x)`.
      config: the hyperparameters read: `gamma`, `vtrace_lambda`, `clip_rho_threshold`,
        `clip_pg_rho_threshold`, `value_coef`, `entropy_coef`, `latent_size`,
        `reconstruction_coef`; any of the numbers may be traced (a population's members).

    Returns:
      `(loss, metrics)`: the scalar loss (no gradient through V-trace's advantages, targets
      or importance weights), and scalars `loss`, `pg_loss`, `value_loss`, `entropy`,
      `approx_kl` (behaviour to current, `mean((rho - 1) - log rho)`), `rho_clip_fraction`
      (the share of `rho` above `clip_rho_threshold`), and with a latent `reconstruction_loss`.
    """
    logits, value, next_value, reconstruction = outputs(params, traj)
    log_prob = categorical_log_prob(logits, traj.action)
    vtrace = vtrace_on_trajectory(
        traj, value, next_value, log_prob, config.gamma, config.vtrace_lambda,
        config.clip_rho_threshold, config.clip_pg_rho_threshold,
    )
    pg_loss = -jnp.mean(log_prob * jax.lax.stop_gradient(vtrace.pg_advantage))
    value_loss = 0.5 * jnp.mean(jnp.square(vtrace.errors))
    neg_entropy = entropy_loss(logits)
    loss = pg_loss + config.value_coef * value_loss + config.entropy_coef * neg_entropy
    log_rho = log_prob - traj.extras["log_prob"]
    metrics = {
        "loss": loss,
        "pg_loss": pg_loss,
        "value_loss": value_loss,
        "entropy": -neg_entropy,
        "approx_kl": jnp.mean(jnp.expm1(log_rho) - log_rho),
        "rho_clip_fraction": jnp.mean(log_rho > jnp.log(config.clip_rho_threshold)),
    }
    if config.latent_size > 0:
        loss = loss + config.reconstruction_coef * reconstruction
        metrics.update(loss=loss, reconstruction_loss=reconstruction)
    return loss, metrics


def make_impala(
    config: ImpalaConfig,
    obs_spec: ObservationSpec,
    action_spec: DiscreteSpec,
    *,
    num_updates: int,
    axis_name: parallel.AxisName = None,
) -> Agent:
    """Build the IMPALA `Agent`.

    num_updates: how many times `update` will be called in the run (for lr annealing).
    axis_name:   mesh axis (or axes) to average gradients and statistics over; None on one
                 device.
    """
    model = make_actor_critic_model(
        config.torso, config.hidden_sizes, config.activation, config.shared_torso, obs_spec, action_spec,
        CATEGORICAL, core=config.core, core_size=config.core_size, latent_size=config.latent_size,
        reconstruction=config.reconstruction,
    )
    optimizer = make_optimizer(config, num_updates * config.num_epochs * config.num_minibatches)

    init = make_init(model.init, optimizer)

    def loss_fn(params: Params, traj: Trajectory) -> tuple[Array, dict[str, Array]]:
        return impala_loss(params, model.train_outputs, traj, config)

    grad_fn = parallel.value_and_mean_grad(loss_fn, axis_name, has_aux=True)

    sgd_epochs = make_sgd_epochs(
        grad_fn, optimizer, sequence_minibatches, config.num_epochs, config.num_minibatches,
        unroll=config.unroll_sgd,
    )

    def update(state: AgentState, traj: Trajectory, key: PRNGKey):
        params, opt_state, metrics = sgd_epochs(state.params, state.opt_state, traj, key)
        metrics = parallel.pmean(metrics, axis_name)
        return AgentState(params, opt_state, state.update_count + 1), metrics

    agent = Agent(init=init, act=model.act, update=update, greedy_act=model.greedy_act,
                  initial_core=model.initial_core)
    return with_replay(agent, config.replay_fraction, config.replay_capacity, obs_spec, axis_name)


def _probe_config() -> ImpalaConfig:
    return ImpalaConfig(learning_rate=3e-3, optimizer="adam", anneal_lr=False, max_grad_norm=0.5, num_epochs=2,
                        num_minibatches=2, entropy_coef=0.0, hidden_sizes=(16,), gamma=0.9)


ALGORITHM = Algorithm(
    name="impala", config=ImpalaConfig, make=make_impala, check_batch=ImpalaConfig.check_batch,
    action_spaces=(DiscreteSpec,), masks=True, structured_obs=True, probe_config=_probe_config, probe_steps=20_000,
    exact_config=lambda config, batch: dataclasses.replace(config, num_minibatches=1),
    recurrent=lambda config: dataclasses.replace(config, core="lstm", core_size=16),
)
