"""Proximal Policy Optimization (Schulman et al. 2017) as a podracer `Agent`.

Written once, run by both architectures: `update` sees a time-major trajectory on one
device and averages gradients and batch statistics over `axis_name` when it runs
under `shard_map`. The action spec picks the policy: categorical logits for a
`DiscreteSpec`, a diagonal Gaussian with a state-independent log-std for a `BoxSpec`
(actions clipped to the box; the loss takes the unclipped sample's log-probability, see
`podracer.agents.policies`). Observation normalisation and reward scaling are options
(`podracer.agents.normalization`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax

from podracer import parallel
from podracer.agents.acting import apply_time_major
from podracer.agents.actor_critic import ActorCriticModel, check_model_fields, make_actor_critic_model
from podracer.agents.impala import vtrace_on_trajectory
from podracer.agents.networks import ACTIVATIONS, TORSOS
from podracer.agents.normalization import with_normalization
from podracer.agents.policies import Policy, policy_for
from podracer.agents.registry import Algorithm
from podracer.agents.schedules import learning_rate
from podracer.agents.sgd import make_init, make_sgd_epochs
from podracer.config import check
from podracer.ops import clipped_surrogate_loss, clipped_value_loss, gae_advantages
from podracer.replay.mixing import check_replay, with_replay
from podracer.types import (
    ActionSpec,
    Agent,
    AgentState,
    BatchShape,
    BoxSpec,
    DiscreteSpec,
    ObservationSpec,
    Params,
    PRNGKey,
    Trajectory,
    split_mask,
)


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO hyperparameters. Defaults: CleanRL's / PureJaxRL's classic-control settings."""

    learning_rate: float = 2.5e-4  # Adam step size (annealed with anneal_lr)
    anneal_lr: bool = True  # linear decay to 0 over the run
    num_epochs: int = 4  # passes over each update's batch
    num_minibatches: int = 4  # minibatches per epoch, per device, slicing its T * B transitions
    gamma: float = 0.99  # discount factor per env step
    gae_lambda: float = 0.95  # GAE's lambda (bias/variance of the advantages)
    # "gae": generalised advantage estimation (Schulman et al. 2016); or
    # "vtrace": advantages and value targets by V-trace from the behaviour policy's
    # log-probabilities, for actors that lag behind the learner (Sebulba); see
    # `vtrace_advantages_and_targets`.
    advantage: Literal["gae", "vtrace"] = "gae"
    vtrace_lambda: float = 0.95  # V-trace's lambda (with advantage vtrace)
    clip_rho_threshold: float = 1.0  # V-trace's rho-bar of the value targets
    clip_pg_rho_threshold: float = 1.0  # V-trace's rho-bar of the policy-gradient advantage
    clip_eps: float = 0.2  # surrogate ratio clipped to 1 +- clip_eps (and the value, with clip_value)
    clip_value: bool = True  # clip the value update around the values at the update's start, as CleanRL
    entropy_coef: float = 0.01  # weight of the entropy bonus
    value_coef: float = 0.5  # weight of the value loss
    max_grad_norm: float = 0.5  # gradients are rescaled to at most this global L2 norm
    adam_eps: float = 1e-5  # Adam's epsilon, added to the root of the second-moment estimate
    normalize_advantages: bool = True  # standardise advantages over the global minibatch (all devices)
    # network body: an MLP, or a CNN for pixels; dict/NamedTuple observations: "mlp" flattens and
    # concatenates their fields, "multi_encoder" gives each image-like field a convolution first
    torso: Literal["mlp", "nature_cnn", "impala_cnn", "multi_encoder"] = "mlp"
    hidden_sizes: tuple[int, ...] = (64, 64)  # MLP layer widths
    activation: Literal["tanh", "relu", "gelu"] = "tanh"  # MLP activation
    shared_torso: bool = False  # one body for policy and value (else two)
    unroll_sgd: bool = False  # unroll epochs and minibatches (faster CNN updates on CPU)
    log_std_init: float = 0.0  # continuous actions: initial log-std of the Gaussian policy (state-independent)
    normalize_observations: bool = False  # running mean/variance normalisation of observations (agent state)
    obs_clip: float = 10.0  # normalised observations are clipped to +-obs_clip
    scale_rewards: bool = False  # rewards divided by the running std of the discounted return (agent state)
    reward_clip: float = 10.0  # scaled rewards are clipped to +-reward_clip
    replay_fraction: float = 0.0  # share of each update's sequences replayed from the device's buffer (vtrace only)
    replay_capacity: int = 100_000  # steps held by each learner device's sequence buffer (with replay)
    # A recurrent core between the torso and the heads ("lstm" or "gru", reset at every
    # episode start; minibatches then hold whole sequences), or "none" (feed-forward).
    core: Literal["none", "lstm", "gru"] = "none"
    core_size: int = 128  # units of the recurrent core
    # A compressed latent (RLDM 2019's auto-encoder): the torso feeds a Dense of latent_size
    # units that linear policy and value heads read alone, and a decoder reconstructs the
    # observation from it, trained jointly with the agent (0: no latent; needs shared_torso).
    latent_size: int = 0
    reconstruction_coef: float = 1.0  # weight of the reconstruction loss (with a latent)
    reconstruction: Literal["mse", "sigmoid_ce"] = "mse"  # squared error, or sigmoid cross-entropy for 0/1 grids

    def __post_init__(self) -> None:
        check(self.learning_rate > 0, "agent.learning_rate", "must be > 0", self.learning_rate)
        check(self.num_epochs >= 1, "agent.num_epochs", "must be >= 1", self.num_epochs)
        check(self.num_minibatches >= 1, "agent.num_minibatches", "must be >= 1", self.num_minibatches)
        check(0 <= self.gamma <= 1, "agent.gamma", "must be in [0, 1]", self.gamma)
        check(0 <= self.gae_lambda <= 1, "agent.gae_lambda", "must be in [0, 1]", self.gae_lambda)
        check(self.advantage in ("gae", "vtrace"), "agent.advantage", "must be 'gae' or 'vtrace'",
              self.advantage)
        check(0 <= self.vtrace_lambda <= 1, "agent.vtrace_lambda", "must be in [0, 1]", self.vtrace_lambda)
        check(self.clip_rho_threshold > 0, "agent.clip_rho_threshold", "must be > 0", self.clip_rho_threshold)
        check(self.clip_pg_rho_threshold > 0, "agent.clip_pg_rho_threshold", "must be > 0",
              self.clip_pg_rho_threshold)
        check(self.clip_eps > 0, "agent.clip_eps", "must be > 0", self.clip_eps)
        check(self.entropy_coef >= 0, "agent.entropy_coef", "must be >= 0", self.entropy_coef)
        check(self.value_coef >= 0, "agent.value_coef", "must be >= 0", self.value_coef)
        check(self.max_grad_norm > 0, "agent.max_grad_norm", "must be > 0", self.max_grad_norm)
        check(self.adam_eps > 0, "agent.adam_eps", "must be > 0", self.adam_eps)
        check(self.torso in TORSOS, "agent.torso", f"must be one of {TORSOS}", self.torso)
        check(len(self.hidden_sizes) > 0 and min(self.hidden_sizes) > 0,
              "agent.hidden_sizes", "must be positive sizes", self.hidden_sizes)
        check(self.activation in ACTIVATIONS, "agent.activation", f"must be one of {ACTIVATIONS}",
              self.activation)
        # exp(+-20): a standard deviation from 2e-9 to 5e8; beyond, float32 log-probabilities
        # and samples overflow (+-90 compiled, then stopped on a non-finite loss)
        check(math.isfinite(self.log_std_init) and abs(self.log_std_init) <= 20, "agent.log_std_init",
              "must be in [-20, 20]", self.log_std_init)
        check(0 <= self.replay_fraction < 1, "agent.replay_fraction", "must be in [0, 1)", self.replay_fraction)
        check(self.replay_fraction == 0 or self.advantage == "vtrace", "agent.replay_fraction",
              "needs agent.advantage vtrace (replayed data is off-policy)", self.replay_fraction)
        check(self.replay_capacity >= 1, "agent.replay_capacity", "must be >= 1", self.replay_capacity)
        check_model_fields(self)
        check(self.latent_size == 0 or self.reconstruction == "mse" or not self.normalize_observations,
              "agent.reconstruction", "must be 'mse' with normalize_observations (normalised targets leave [0, 1])",
              self.reconstruction)
        check(self.obs_clip > 0, "agent.obs_clip", "must be > 0", self.obs_clip)
        check(self.reward_clip > 0, "agent.reward_clip", "must be > 0", self.reward_clip)

    def check_batch(self, batch: BatchShape) -> None:
        """Raise ConfigError unless one device's batch of `T * B` transitions splits into
        `num_minibatches` minibatches (with a recurrent core: its `B` whole sequences)."""
        if self.core != "none":
            check(batch.envs_per_device % self.num_minibatches == 0, "agent.num_minibatches",
                  f"must divide the {batch.envs_per_device} environments of each device (a recurrent core "
                  "learns on whole sequences)", self.num_minibatches)
            return
        transitions = batch.transitions
        if self.replay_fraction > 0:
            transitions += batch.rollout_length * check_replay(self.replay_fraction, self.replay_capacity, batch)
        check(transitions % self.num_minibatches == 0, "agent.num_minibatches",
              f"must divide the per-device batch of {transitions} transitions (replayed ones included)",
              self.num_minibatches)


class PPOBatch(NamedTuple):
    """What PPO's loss reads of a batch, every leaf led by the same axes: `[N]` flat
    transitions (feed-forward) or `[T, b]` whole sequences (recurrent core)."""

    inputs: Any  # what the model's `train_forward` reads: observations (recurrent: with starts and core states)
    action: jax.Array  # the action the policy's log-probability is taken of (a Gaussian's unclipped sample)
    log_prob: jax.Array  # log-probability of `action` under the policy the ratio is taken against
    value: jax.Array  # `V(obs)` at the update's start: the centre of the value clip
    advantage: jax.Array
    target: jax.Array  # the value target


def ppo_loss(
    params: Params,
    forward: Callable[[Params, Any], tuple[Any, jax.Array, jax.Array]],
    policy: Policy,
    batch: PPOBatch,
    config: PPOConfig,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """PPO's loss (Schulman et al. 2017, eq. 9): the clipped surrogate (eq. 7), plus
    `value_coef` times the value loss, minus `entropy_coef` times the entropy bonus, plus
    with a latent `reconstruction_coef` times the auto-encoder's reconstruction loss.

    Args:
      params: the parameters differentiated.
      forward: `(params, batch.inputs) -> (out, value, aux)`, the model's `train_forward`:
        the policy output, `V(obs)` shaped like `batch.action`'s leading axes, and the
        scalar auxiliary (reconstruction) loss, 0 without a latent.
      policy: the action distribution of `out` (`log_prob`, `entropy`).
      batch: a minibatch, `[N]` or `[T, b]` leading every leaf.
      config: the hyperparameters read: `clip_eps` (the ratio's clip, and the value's with
        `clip_value`), `value_coef`, `entropy_coef`, `latent_size`, `reconstruction_coef`;
        any of the numbers may be traced (a population's member hyperparameters).

    Returns:
      `(loss, metrics)`: the scalar loss, and scalars `loss`, `pg_loss`, `value_loss`,
      `entropy`, `approx_kl` (`mean((r - 1) - log r)`), `clip_fraction` (the share of
      ratios outside `1 +- clip_eps`), and with a latent `reconstruction_loss`.
    """
    out, value, reconstruction = forward(params, batch.inputs)
    log_ratio = policy.log_prob(out, batch.action) - batch.log_prob
    pg_loss = clipped_surrogate_loss(log_ratio, batch.advantage, config.clip_eps)
    value_loss = clipped_value_loss(value, batch.value, batch.target, config.clip_eps if config.clip_value else None)
    entropy = policy.entropy(out)
    loss = pg_loss + config.value_coef * value_loss - config.entropy_coef * entropy
    ratio = jnp.exp(log_ratio)
    metrics = {
        "loss": loss,
        "pg_loss": pg_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
        "clip_fraction": jnp.mean(jnp.abs(ratio - 1.0) > config.clip_eps),
    }
    if config.latent_size > 0:
        loss = loss + config.reconstruction_coef * reconstruction
        metrics.update(loss=loss, reconstruction_loss=reconstruction)
    return loss, metrics


def make_ppo(
    config: PPOConfig,
    obs_spec: ObservationSpec,
    action_spec: ActionSpec,
    *,
    num_updates: int,
    axis_name: parallel.AxisName = None,
) -> Agent:
    """Build the PPO `Agent` for discrete (`DiscreteSpec`) or continuous (`BoxSpec`) actions.

    num_updates: how many times `update` will be called in the run (for lr annealing).
    axis_name:   mesh axis (or axes) to average gradients and statistics over; None on one
                 device.
    """
    policy = policy_for(action_spec)
    model = make_actor_critic_model(
        config.torso, config.hidden_sizes, config.activation, config.shared_torso, obs_spec, action_spec, policy,
        core=config.core, core_size=config.core_size, log_std_init=config.log_std_init,
        latent_size=config.latent_size, reconstruction=config.reconstruction,
    )
    steps_per_update = config.num_epochs * config.num_minibatches
    lr = learning_rate(config.learning_rate, config.anneal_lr, num_updates * steps_per_update)
    # Over one flat vector of all parameters (the same steps): a handful of kernels per
    # optimizer step instead of a few per parameter array, which is most of a small
    # network's update on CPU, and fewer kernels to compile.
    optimizer = optax.flatten(optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.adam(lr, eps=config.adam_eps),
    ))

    init = make_init(model.init, optimizer)

    def loss_fn(params: Params, batch: PPOBatch) -> tuple[jax.Array, dict[str, jax.Array]]:
        return ppo_loss(params, model.train_forward, policy, batch, config)

    grad_fn = parallel.value_and_mean_grad(loss_fn, axis_name, has_aux=True)

    def normalize_advantages(minibatches: PPOBatch) -> PPOBatch:
        return minibatches._replace(advantage=normalize_per_minibatch(minibatches.advantage, axis_name))

    sgd_epochs = make_sgd_epochs(
        grad_fn, optimizer, model.minibatches, config.num_epochs, config.num_minibatches,
        unroll=config.unroll_sgd, prepare_epoch=normalize_advantages if config.normalize_advantages else None,
    )

    def update(state: AgentState, traj: Trajectory, key: PRNGKey):
        if config.advantage == "vtrace":
            traj, advantage, target = vtrace_advantages_and_targets(model, policy, config, state.params, traj)
            extra_metrics = {}
        else:
            if model.network is not None:
                traj, advantage, target, recomputed = gae_advantages_and_targets(
                    model.network, config, state.params, traj)
            else:  # a recurrent model unrolls from the trajectory's core state, always recomputing
                _, value, next_value = model.outputs(state.params, traj)
                traj, advantage, target = gae_from_values(config, traj, value, next_value)
                recomputed = jnp.ones((), bool)
            extra_metrics = {"values_recomputed": recomputed.astype(jnp.float32)}
        action = policy.policy_action(traj.action, traj.extras)
        batch = model.prepare(
            PPOBatch(model.inputs(traj), action, traj.extras["log_prob"], traj.extras["value"], advantage, target)
        )
        params, opt_state, metrics = sgd_epochs(state.params, state.opt_state, batch, key)
        metrics = parallel.pmean({**metrics, **extra_metrics}, axis_name)
        return AgentState(params, opt_state, state.update_count + 1), metrics

    agent = Agent(init=init, act=model.act, update=update, greedy_act=model.greedy_act,
                  initial_core=model.initial_core)
    agent = with_normalization(
        agent, obs_spec, normalize_observations=config.normalize_observations, obs_clip=config.obs_clip,
        scale_rewards=config.scale_rewards, reward_clip=config.reward_clip, gamma=config.gamma,
        axis_name=axis_name,
    )
    return with_replay(agent, config.replay_fraction, config.replay_capacity, obs_spec, axis_name)


def gae_advantages_and_targets(network, config: PPOConfig, params, traj: Trajectory):
    """GAE advantages and value targets over one value function, the learner's `params`:
    `(traj, advantage [T, B], target [T, B], recomputed)`; the returned `traj.extras["value"]`
    holds the `V(obs)` used (the loss clips its value around them), `recomputed` says whether
    the behaviour's had to be replaced (see `gae_values`)."""
    value, next_value, recomputed = gae_values(network, params, traj)
    return (*gae_from_values(config, traj, value, next_value), recomputed)


def gae_from_values(config: PPOConfig, traj: Trajectory, value: jax.Array, next_value: jax.Array):
    """`(traj, advantage [T, B], target [T, B])`: GAE over `V(obs)` and `V(next_obs)`, each
    `[T, B]`; `traj.extras["value"]` becomes `value`."""
    discount = config.gamma * (1.0 - traj.terminated.astype(jnp.float32))
    end = traj.terminated | traj.truncated
    gae = jax.vmap(gae_advantages, in_axes=(1, 1, 1, 1, None, 1), out_axes=1)
    advantage, target = gae(traj.reward, discount, value, next_value, config.gae_lambda, end)
    return traj._replace(extras={**traj.extras, "value": value}), advantage, target


def gae_values(network, params, traj: Trajectory) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`(V(obs) [T, B], V(next_obs) [T, B], recomputed)`, every value from the learner's
    `params`, so that GAE never mixes two value functions (an actor that lags behind the
    learner computed its values with older parameters).

    Fast where nothing lags (Anakin; Sebulba with `max_policy_lag 0`): the actor's values
    (`traj.extras["value"]`) are then the learner's, and GAE reuses them: `V(obs[t])`, and
    `V(next_obs[t]) = V(obs[t + 1])` where the episode went on; only the last `next_obs` (a
    `[B]` forward pass) and the final observations of truncated steps (a pass over
    `next_obs`, run only if some step before the last was truncated: a time limit, rare)
    need the network. Whether the actor's values are the learner's is checked on the first
    step, whose `V(obs[0])` is computed (`[B]`, as the actor did) and compared bit for bit;
    if any differs (a lagging actor, `recomputed` is True), every `V(obs)` is recomputed,
    one forward pass over the `[T, B]` observations: the price of consistency under lag.
    (A mismatch by float rounding alone only costs that pass; the actor's values pass only
    if its parameters give the learner's values to the last bit on `B` observations, i.e.
    they are the learner's, or differ by less than float32 can show: a last update of an
    annealed learning rate.)

    An actor that computes no values (extras without `"value"`: a critic with a torso of its
    own, see `actor_critic._feed_forward`) leaves `V(obs)` to one pass here, and `recomputed`
    is False (there was nothing stale to replace).
    """
    _, last = network.apply(params, split_mask(jax.tree.map(lambda x: x[-1], traj.next_obs))[0])
    if "value" not in traj.extras:
        value, stale = apply_time_major(network, params, traj.obs)[1], jnp.zeros((), bool)
    else:
        behaviour = traj.extras["value"]
        _, first = network.apply(params, split_mask(jax.tree.map(lambda x: x[0], traj.obs))[0])
        stale = jnp.any(first != behaviour[0])

        # Loops that run their body at most once: `lax.cond` fails under vmap in shard_map.
        def recompute(carry):
            return jnp.zeros_like(carry[0]), apply_time_major(network, params, traj.obs)[1]

        value = jax.lax.while_loop(lambda carry: carry[0], recompute, (stale, behaviour))[1]
    shifted = jnp.concatenate([value[1:], last[None]])

    def with_truncations(carry):
        _, exact = apply_time_major(network, params, traj.next_obs)
        return jnp.zeros_like(carry[0]), jnp.where(traj.truncated, exact, carry[1])

    pending = jnp.any(traj.truncated[:-1])
    next_value = jax.lax.while_loop(lambda carry: carry[0], with_truncations, (pending, shifted))[1]
    return value, next_value, stale


def vtrace_advantages_and_targets(model: ActorCriticModel, policy: Policy, config: PPOConfig, params,
                                  traj: Trajectory):
    """PPO for lagging actors: V-trace corrects from the behaviour policy `mu` to the policy
    `pi_k` at the start of this update, and the clipped surrogate keeps `pi` near `pi_k`.

    With `pi_k`'s log-probabilities and values recomputed here, the value targets are
    V-trace's `v_s` and the advantage its policy-gradient advantage, which already carries
    the truncated importance weight `min(rho_bar, pi_k / mu)`; the surrogate's ratio is then
    `pi / pi_k` (the returned `traj.extras` hold `pi_k`'s log-probabilities and values), so
    the whole estimator is importance-weighted from `mu` to `pi`. With no lag (`pi_k = mu`,
    as under Anakin) it is PPO with V-trace(lambda) = TD(lambda) returns.
    """
    out, value, next_value = model.outputs(params, traj)
    log_prob = policy.log_prob(out, policy.policy_action(traj.action, traj.extras))
    vtrace = vtrace_on_trajectory(
        traj, value, next_value, log_prob, config.gamma, config.vtrace_lambda,
        config.clip_rho_threshold, config.clip_pg_rho_threshold,
    )
    traj = traj._replace(extras={**traj.extras, "log_prob": log_prob, "value": value})
    return traj, vtrace.pg_advantage, vtrace.errors + value


def normalize_per_minibatch(x: jax.Array, axis_name: parallel.AxisName) -> jax.Array:
    """Standardise each minibatch `x[m]` of `x [M, ...]` with the mean and standard
    deviation of global minibatch `m` (its part on every device, all the same size): every
    minibatch of an epoch in one collective of `[M, 2]` moments, instead of one per step."""
    axes = tuple(range(1, x.ndim))
    moments = parallel.pmean(jnp.stack([jnp.mean(x, axes), jnp.mean(jnp.square(x), axes)], axis=-1), axis_name)
    mean, var = moments[:, 0], jnp.maximum(moments[:, 1] - jnp.square(moments[:, 0]), 0.0)
    shape = (-1,) + (1,) * len(axes)
    return (x - mean.reshape(shape)) / (jnp.sqrt(var).reshape(shape) + 1e-8)


def _probe_config() -> PPOConfig:
    return PPOConfig(learning_rate=3e-3, anneal_lr=False, num_minibatches=2, num_epochs=4, entropy_coef=0.0,
                     hidden_sizes=(16,), gamma=0.9)


ALGORITHM = Algorithm(
    name="ppo", config=PPOConfig, make=make_ppo, check_batch=PPOConfig.check_batch,
    action_spaces=(DiscreteSpec, BoxSpec), masks=True, structured_obs=True,
    probe_config=_probe_config, probe_steps=20_000,
    # One minibatch: the update of a global batch is then the same however it is split.
    exact_config=lambda config, batch: dataclasses.replace(config, num_minibatches=1),
    recurrent=lambda config: dataclasses.replace(config, core="lstm", core_size=16),
)
