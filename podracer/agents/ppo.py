"""Proximal Policy Optimization (Schulman et al. 2017) as a podracer `Agent`.

Written once, run by both architectures: `update` sees a time-major trajectory on one
device and averages gradients and batch statistics over `axis_name` when it runs
under `shard_map`.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp
import optax

from podracer import parallel
from podracer.agents import common
from podracer.config import check
from podracer.ops import clipped_surrogate_loss, entropy_loss, categorical_log_prob, gae_advantages
from podracer.types import AgentState, Agent, DiscreteSpec, ObsSpec, PRNGKey, Trajectory


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO hyperparameters. Defaults: CleanRL's / PureJaxRL's classic-control settings."""

    learning_rate: float = 2.5e-4
    anneal_lr: bool = True  # linear decay to 0 over the run
    num_epochs: int = 4
    num_minibatches: int = 4  # per update, per device
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    clip_value: bool = True
    entropy_coef: float = 0.01
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    adam_eps: float = 1e-5
    normalize_advantages: bool = True
    torso: Literal["mlp", "nature_cnn", "impala_cnn"] = "mlp"
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: Literal["tanh", "relu", "gelu"] = "tanh"
    shared_torso: bool = False

    def __post_init__(self) -> None:
        check(self.learning_rate > 0, "agent.learning_rate", "must be > 0", self.learning_rate)
        check(self.num_epochs >= 1, "agent.num_epochs", "must be >= 1", self.num_epochs)
        check(self.num_minibatches >= 1, "agent.num_minibatches", "must be >= 1", self.num_minibatches)
        check(0 <= self.gamma <= 1, "agent.gamma", "must be in [0, 1]", self.gamma)
        check(0 <= self.gae_lambda <= 1, "agent.gae_lambda", "must be in [0, 1]", self.gae_lambda)
        check(self.clip_eps > 0, "agent.clip_eps", "must be > 0", self.clip_eps)
        check(self.max_grad_norm > 0, "agent.max_grad_norm", "must be > 0", self.max_grad_norm)
        check(self.torso in common.TORSOS, "agent.torso", f"must be one of {common.TORSOS}", self.torso)
        check(len(self.hidden_sizes) > 0 and min(self.hidden_sizes) > 0,
              "agent.hidden_sizes", "must be positive sizes", self.hidden_sizes)

    def check_batch(self, batch_size: int) -> None:
        """Raise ConfigError unless a per-device batch of `batch_size` transitions splits
        into `num_minibatches` minibatches."""
        check(batch_size % self.num_minibatches == 0, "agent.num_minibatches",
              f"must divide the per-device batch of {batch_size} transitions", self.num_minibatches)


def make_ppo(
    config: PPOConfig,
    obs_spec: ObsSpec,
    action_spec: DiscreteSpec,
    *,
    num_updates: int,
    axis_name: parallel.AxisName = None,
) -> Agent:
    """Build the PPO `Agent`.

    num_updates: how many times `update` will be called in the run (for lr annealing).
    axis_name:   mesh axis (or axes) to average gradients and statistics over; None on one
                 device.
    """
    network = common.make_actor_critic(
        config.torso, config.hidden_sizes, config.activation, config.shared_torso,
        obs_spec, action_spec,
    )
    steps_per_update = config.num_epochs * config.num_minibatches
    if config.anneal_lr:
        lr = optax.linear_schedule(config.learning_rate, 0.0, max(1, num_updates * steps_per_update))
    else:
        lr = config.learning_rate
    optimizer = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.adam(lr, eps=config.adam_eps),
    )

    def init(key: PRNGKey) -> AgentState:
        params = common.init_params(network, key, obs_spec)
        return AgentState(params, optimizer.init(params), jnp.zeros((), jnp.int32))

    def loss_fn(params, minibatch):
        obs, action, behaviour_log_prob, old_value, advantage, target = minibatch
        logits, value = network.apply(params, obs)
        log_ratio = categorical_log_prob(logits, action) - behaviour_log_prob
        if config.normalize_advantages:
            advantage = _normalize(advantage, axis_name)
        pg_loss = clipped_surrogate_loss(log_ratio, advantage, config.clip_eps)
        value_loss = jnp.square(value - target)
        if config.clip_value:
            clipped = old_value + jnp.clip(value - old_value, -config.clip_eps, config.clip_eps)
            value_loss = jnp.maximum(value_loss, jnp.square(clipped - target))
        value_loss = 0.5 * jnp.mean(value_loss)
        neg_entropy = entropy_loss(logits)
        loss = pg_loss + config.value_coef * value_loss + config.entropy_coef * neg_entropy
        ratio = jnp.exp(log_ratio)
        metrics = {
            "loss": loss,
            "pg_loss": pg_loss,
            "value_loss": value_loss,
            "entropy": -neg_entropy,
            "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
            "clip_fraction": jnp.mean(jnp.abs(ratio - 1.0) > config.clip_eps),
        }
        return loss, metrics

    grad_fn = parallel.value_and_mean_grad(loss_fn, axis_name, has_aux=True)

    def sgd_step(carry, minibatch):
        params, opt_state = carry
        (_, metrics), grads = grad_fn(params, minibatch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        metrics["grad_norm"] = optax.tree.norm(grads)
        return (params, opt_state), metrics

    def epoch(carry, key):
        params, opt_state, batch = carry
        minibatches = common.shuffled_minibatches(key, batch, config.num_minibatches)
        (params, opt_state), metrics = jax.lax.scan(sgd_step, (params, opt_state), minibatches)
        return (params, opt_state, batch), metrics

    def update(state: AgentState, traj: Trajectory, key: PRNGKey):
        advantage, target = advantages_and_targets(state.params, traj)
        batch = common.flatten_time_batch(
            (traj.obs, traj.action, traj.extras["log_prob"], traj.extras["value"], advantage, target)
        )
        keys = jax.random.split(key, config.num_epochs)
        (params, opt_state, _), metrics = jax.lax.scan(
            epoch, (state.params, state.opt_state, batch), keys
        )
        metrics = parallel.pmean(jax.tree.map(jnp.mean, metrics), axis_name)
        return AgentState(params, opt_state, state.update_count + 1), metrics

    def advantages_and_targets(params, traj: Trajectory):
        _, next_value = network.apply(params, traj.next_obs)
        discount = config.gamma * (1.0 - traj.terminated.astype(jnp.float32))
        end = traj.terminated | traj.truncated
        gae = jax.vmap(gae_advantages, in_axes=(1, 1, 1, 1, None, 1), out_axes=1)
        return gae(traj.reward, discount, traj.extras["value"], next_value, config.gae_lambda, end)

    return Agent(init=init, act=common.make_sampling_act(network), update=update,
                 greedy_act=common.make_greedy_act(network))


def _normalize(x: jax.Array, axis_name: parallel.AxisName) -> jax.Array:
    """Standardize with statistics of the global minibatch (all devices)."""
    mean = parallel.pmean(jnp.mean(x), axis_name)
    var = parallel.pmean(jnp.mean(jnp.square(x - mean)), axis_name)
    return (x - mean) / (jnp.sqrt(var) + 1e-8)
