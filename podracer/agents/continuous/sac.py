"""Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications",
arXiv 1812.05905) as a podracer `Agent`, for `BoxSpec` actions.

A tanh-squashed Gaussian policy rescaled to the action box (its log-probability the exact
change of variables, `podracer.ops.continuous_q`), twin critics whose minimum forms the soft
target, Polyak-averaged target critics, and a temperature learned against a target entropy
(default `-|A|`), each with its own Adam. A gradient step updates the critics, then (every
`policy_delay` steps) the actor against the updated critics and the temperature, then the
target critics. `config.critic` picks the critics (`podracer.agents.continuous.critics`:
twin, CrossQ's, FastTD3's distributional); the entropy term enters every kind's target.
Replay, n-step targets and the gradient-step count are
`podracer.agents.continuous.replay_learning`'s.

State: `params = ContinuousParams(actor, env_steps)` (what actors receive); `opt_state` the
critics (with CrossQ's batch statistics), targets (`()` for CrossQ) and optimisers
(`ContinuousLearnerState`, `extra = SACTemperature`);
`local` the device's buffer.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from podracer import parallel
from podracer.agents.continuous import networks
from podracer.agents.continuous.config import SACConfig
from podracer.agents.continuous.critics import Critics, Variables, make_critics, trainable
from podracer.agents.continuous.replay_learning import (
    ContinuousLearnerState,
    ContinuousParams,
    check_buffer_fits,
    initial_state,
    make_buffer,
    make_replay_update,
    random_until_learning,
)
from podracer.agents.registry import Algorithm
from podracer.counters import Count
from podracer.ops import continuous_q
from podracer.replay.buffer import Transition
from podracer.types import (
    Agent,
    Array,
    BatchShape,
    BoxSpec,
    Observation,
    ObservationSpec,
    Params,
    PRNGKey,
    zeros_like_spec,
)

__all__ = ["ALGORITHM", "SACConfig", "SACModel", "SACTemperature", "make_sac", "sac_actor_loss", "sac_critic_loss",
           "sample_policy"]

STEP_METRICS = ("loss", "actor_loss", "q_mean", "temperature", "temperature_loss", "entropy")


class SACTemperature(NamedTuple):
    """SAC's `ContinuousLearnerState.extra`: `log(alpha)` and its optimiser state."""

    log_temperature: Array
    optimizer: Any


class SACModel(NamedTuple):
    """SAC's networks and action box, as its losses use them."""

    actor: Callable[[Params, Array], tuple[Array, Array]]  # obs [N, ...] -> (mean, log_std) [N, A]
    critics: Critics  # the critics `config.critic` names (`podracer.agents.continuous.critics`)
    low: Array  # the box, [A]
    high: Array
    log_scale: Array  # `continuous_q.box_log_scale(low, high)`


def sample_policy(actor: Params, model: SACModel, obs: Array, key: PRNGKey) -> tuple[Array, Array]:
    """A reparameterised sample of the squashed Gaussian policy: the unit-box action `[N, A]`
    and its log-density in the box `[N]`."""
    mean, log_std = model.actor(actor, obs)
    unit, log_prob = continuous_q.squashed_gaussian_sample(key, mean, log_std)
    return unit, log_prob - model.log_scale


def sac_critic_loss(
    params: Params, critic: Variables, target_critic: Any, actor: Params, model: SACModel, items: Transition,
    temperature: Array, key: PRNGKey,
) -> tuple[Array, tuple[Array, Variables]]:
    """SAC's critic loss, the soft Bellman residual (Haarnoja et al. 2018, "Soft Actor-Critic
    Algorithms and Applications"), with the clipped double Q of its section 6: both critics
    regress on the soft target `r + discount * (min(Q1', Q2')(s', a') - alpha log pi(a'|s'))`, `a'` a
    fresh sample of the policy at the bootstrap observation. The critics' kind (twin, CrossQ,
    distributional) decides how `Q'` and the regression are formed; the entropy term enters
    each kind's target as `-alpha log pi(a'|s')`.

    Args:
      params: the critics' trainable variables (`trainable(critic)`), differentiated.
      critic: the critics' variables (with CrossQ's batch statistics).
      target_critic: the target critics' variables (Polyak averages; `()` for CrossQ).
      actor: the policy's parameters (the next action's sample; no gradient to them).
      model: the networks and the box.
      items: `[N]` n-step transitions; `action` in the box, `discount` 0 after a termination.
      temperature: scalar alpha.
      key: the next action's sample.

    Returns:
      `(loss, (q_mean, critic'))`: for twin critics `mean((Q1 - y)^2) + mean((Q2 - y)^2)`; the
      mean of both critics' `Q(obs, action)`; the critics' variables with the statistics the
      pass computed.
    """
    next_unit, next_log_prob = sample_policy(actor, model, items.next_obs, key)
    return model.critics.loss(params, critic, target_critic, items,
                              continuous_q.from_box(items.action, model.low, model.high), next_unit,
                              -temperature * next_log_prob)


def sac_actor_loss(
    actor: Params, critic: Variables, model: SACModel, obs: Array, temperature: Array, key: PRNGKey
) -> tuple[Array, Array]:
    """SAC's policy loss (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
    Applications"): `mean(alpha log pi(a|s) - min(Q1, Q2)(s, a))`, `a` a reparameterised
    sample, the critics read as the actor sees them (`Critics.q`: expected values, CrossQ's in
    evaluation mode). The temperature's own loss (eq. 18) is
    `podracer.ops.continuous_q.temperature_loss`, on the log-probabilities returned here.

    Args:
      actor: the policy's parameters, differentiated.
      critic: the critics' variables (no gradient to them).
      model: the networks and the box.
      obs: `[N, ...]`.
      temperature: scalar alpha.
      key: the actions' sample.

    Returns:
      `(loss, log_prob [N])`: the scalar loss and the samples' log-densities in the box.
    """
    unit, log_prob = sample_policy(actor, model, obs, key)
    q = model.critics.q(critic, obs, unit)
    return continuous_q.sac_actor_loss(q[0], q[1], log_prob, temperature), log_prob


def make_sac(config: SACConfig, obs_spec: ObservationSpec, action_spec: BoxSpec, *, num_updates: int,
             axis_name: parallel.AxisName = None) -> Agent:
    """Build the SAC `Agent`.

    num_updates: unused (no schedule depends on the run's length).
    axis_name:   mesh axis (or axes) to average gradients over; None on one device.
    """
    del num_updates
    dim = networks.action_dim(tuple(action_spec.shape))
    check_buffer_fits(config, obs_spec, action_spec)
    actor_net = networks.SquashedGaussianActor(dim, networks.make_torso(config), config.log_std_min,
                                               config.log_std_max)
    critics = make_critics(config, axis_name)
    actor_opt = optax.adam(config.actor_learning_rate, b1=config.adam_b1)
    critic_opt = optax.adam(config.critic_learning_rate, b1=config.adam_b1)
    temperature_opt = optax.adam(config.temperature_learning_rate)
    target_entropy = -float(dim) if config.target_entropy is None else config.target_entropy
    low, high = jnp.asarray(action_spec.low), jnp.asarray(action_spec.high)
    log_scale = continuous_q.box_log_scale(action_spec.low, action_spec.high)
    replay = make_buffer(config)

    model = SACModel(actor_net.apply, critics, low, high, log_scale)

    def critic_loss(params: Params, actor: Params, learner: ContinuousLearnerState, items: Transition,
                    temperature: Array, key: PRNGKey):
        return sac_critic_loss(params, learner.critic, learner.target_critic, actor, model, items, temperature, key)

    def actor_loss(actor: Params, critic: Variables, obs: Array, temperature: Array, key: PRNGKey):
        return sac_actor_loss(actor, critic, model, obs, temperature, key)

    def target_update(critic: dict, target: Any) -> Any:
        """The target critics Polyak-averaged towards `critic` (none for CrossQ)."""
        return optax.incremental_update(critic, target, config.tau) if critics.has_target else target

    critic_grad = parallel.value_and_mean_grad(critic_loss, axis_name, has_aux=True)
    actor_grad = parallel.value_and_mean_grad(actor_loss, axis_name, has_aux=True)
    temperature_grad = parallel.value_and_mean_grad(continuous_q.temperature_loss, axis_name)

    def learn_on_batch(actor: Params, learner: ContinuousLearnerState, items: Transition, key: PRNGKey):
        critic_key, actor_key = jax.random.split(key)
        extra = learner.extra
        temperature = jnp.exp(extra.log_temperature)
        (loss, (q_mean, critic)), grads = critic_grad(trainable(learner.critic), actor, learner, items, temperature,
                                                      critic_key)
        updates, critic_opt_state = critic_opt.update(grads, learner.critic_optimizer, trainable(critic))
        critic = {**critic, **optax.apply_updates(trainable(critic), updates)}

        steps = learner.gradient_steps.add(1)
        due = learner.gradient_steps.mod(config.policy_delay) == 0
        (a_loss, log_prob), grads = actor_grad(actor, critic, items.obs, temperature, actor_key)
        updates, actor_opt_state = actor_opt.update(grads, learner.actor_optimizer, actor)
        new_actor = optax.apply_updates(actor, updates)
        t_loss, t_grad = temperature_grad(extra.log_temperature, log_prob, target_entropy)
        t_updates, t_opt_state = temperature_opt.update(t_grad, extra.optimizer, extra.log_temperature)
        new_extra = SACTemperature(optax.apply_updates(extra.log_temperature, t_updates), t_opt_state)
        if not config.autotune:
            new_extra = extra
        actor, actor_opt_state, extra = _where(due, (new_actor, actor_opt_state, new_extra),
                                               (actor, learner.actor_optimizer, extra))
        learner = learner._replace(
            critic=critic, critic_optimizer=critic_opt_state, actor_optimizer=actor_opt_state, extra=extra,
            target_critic=target_update(critic, learner.target_critic), gradient_steps=steps)
        metrics = {"loss": loss, "actor_loss": a_loss, "q_mean": q_mean, "temperature": temperature,
                   "temperature_loss": t_loss, "entropy": -jnp.mean(log_prob)}
        return actor, learner, metrics

    def init(key: PRNGKey):
        actor_key, critic_key = jax.random.split(key)
        obs = jnp.asarray(zeros_like_spec(obs_spec, (1,)))
        actor = actor_net.init(actor_key, obs)
        critic = critics.init(critic_key, obs, jnp.zeros((1, dim), jnp.float32))
        # log(0) = -inf: alpha = 0 exactly (no entropy bonus), possible with autotune off
        log_temperature = jnp.log(jnp.float32(config.initial_temperature))
        learner = ContinuousLearnerState(
            critic, critic if critics.has_target else (), actor_opt.init(actor), critic_opt.init(trainable(critic)),
            SACTemperature(log_temperature, temperature_opt.init(log_temperature)),
            Count.zeros(), jnp.zeros((), jnp.float32), Count.zeros())
        return initial_state(actor, learner, replay, obs_spec, action_spec)

    def act(params: ContinuousParams, obs: Observation, key: PRNGKey) -> tuple[Array, dict[str, Array]]:
        """A squashed-Gaussian sample in the box (uniform in the box before learning_starts)."""
        policy_key, random_key = jax.random.split(key)
        mean, log_std = actor_net.apply(params.actor, obs)
        unit, _ = continuous_q.squashed_gaussian_sample(policy_key, mean, log_std)
        return random_until_learning(config, action_spec, params, random_key,
                                     continuous_q.to_box(unit, low, high)), {}

    def greedy_act(params: ContinuousParams, obs: Observation) -> Array:
        """`tanh(mean)` in the box: the deterministic action for evaluation."""
        mean, _ = actor_net.apply(params.actor, obs)
        return continuous_q.to_box(jnp.tanh(mean), low, high)

    update = make_replay_update(config, replay, learn_on_batch, axis_name, STEP_METRICS, "sac")
    return Agent(init=init, act=act, update=update, greedy_act=greedy_act)


def _where(condition: Array, new: Any, old: Any) -> Any:
    return jax.tree.map(lambda n, o: jnp.where(condition, n, o), new, old)


def _probe_config() -> SACConfig:
    return SACConfig(actor_learning_rate=3e-3, critic_learning_rate=3e-3, temperature_learning_rate=1e-2,
                     initial_temperature=0.1, buffer_size=4_096, batch_size=64, gradient_steps=4, learning_starts=512,
                     hidden_sizes=(32, 32), gamma=0.9)


def _exact_config(config: SACConfig, batch: BatchShape) -> SACConfig:
    """One gradient step on a sample that is the whole batch however it is split
    (stratified sampling of `N` items from a device holding `N / D` takes each `D` times),
    with no sampling noise: no entropy bonus (alpha = 0, fixed) and a policy of std at most
    `e^-40`, whose samples equal its mean in float32 (their gradients ~1e-18)."""
    n = batch.transitions
    return dataclasses.replace(config, sampling="stratified", buffer_size=max(config.buffer_size, n), batch_size=n,
                               gradient_steps=1, replay_ratio=None, learning_starts=0, n_step=1,
                               autotune=False, initial_temperature=0.0, log_std_min=-41.0, log_std_max=-40.0)


ALGORITHM = Algorithm(
    name="sac", config=SACConfig, make=make_sac, check_batch=SACConfig.check_batch, action_spaces=(BoxSpec,),
    probe_config=_probe_config, probe_steps=20_000, exact_config=_exact_config, step_metrics=STEP_METRICS,
)
