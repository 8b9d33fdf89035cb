"""TD3 (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
Methods", arXiv 1802.09477) as a podracer `Agent`, for `BoxSpec` actions.

A deterministic tanh actor explores with Gaussian noise; twin critics regress on the clipped
double-Q target at a smoothed target action (clipped noise on the target actor's action);
the actor (on Q1) and both target networks (Polyak) are updated every `policy_delay`
gradient steps. `config.critic` picks the critics (`podracer.agents.continuous.critics`:
twin, CrossQ's, FastTD3's distributional); CrossQ keeps no target networks, so its target
action is the online actor's, smoothed. Replay, n-step targets and the gradient-step count
are `podracer.agents.continuous.replay_learning`'s.

State: `params = ContinuousParams(actor, env_steps)`; `opt_state` a `ContinuousLearnerState`
whose `extra` is the target actor (`()` for CrossQ); `local` the device's buffer.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from podracer import parallel
from podracer.agents.continuous import networks
from podracer.agents.continuous.config import TD3Config
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

__all__ = ["ALGORITHM", "TD3Config", "TD3Model", "make_td3", "td3_actor_loss", "td3_critic_loss"]

STEP_METRICS = ("loss", "actor_loss", "q_mean", "actor_updated")


class TD3Model(NamedTuple):
    """TD3's networks and action box, as its losses use them."""

    actor: Callable[[Params, Array], Array]  # obs [N, ...] -> unit-box action [N, A]
    critics: Critics  # the critics `config.critic` names (`podracer.agents.continuous.critics`)
    low: Array  # the box, [A]
    high: Array


def td3_critic_loss(
    params: Params, critic: Variables, target_critic: Any, target_actor: Params, model: TD3Model, items: Transition,
    key: PRNGKey, config: TD3Config,
) -> tuple[Array, tuple[Array, Variables]]:
    """TD3's critic loss (Fujimoto et al. 2018, alg. 1): both critics regress on the clipped
    double-Q target `r + discount * min(Q1', Q2')(s', a')` (eq. 10), `a'` the target actor's
    action smoothed by clipped Gaussian noise, `clip(mu'(s') + clip(eps, -c, c), -1, 1)` (eq. 14).
    The critics' kind (twin, CrossQ, distributional) decides how `Q'` and the regression are
    formed.

    Args:
      params: the critics' trainable variables (`trainable(critic)`), differentiated.
      critic: the critics' variables (with CrossQ's batch statistics).
      target_critic: the target critics' variables (`()` for CrossQ).
      target_actor: the actor whose smoothed action is bootstrapped from (the target actor; the
        online one for CrossQ, which keeps no targets).
      model: the networks and the box.
      items: `[N]` n-step transitions; `action` in the box, `discount` 0 after a termination.
      key: the smoothing noise's.
      config: the hyperparameters read: `target_noise` (the noise's std, unit-box units) and
        `target_noise_clip` (c).

    Returns:
      `(loss, (q_mean, critic'))`: for twin critics `mean((Q1 - y)^2) + mean((Q2 - y)^2)`; the
      mean of both critics' `Q(obs, action)`; the critics' variables with the statistics the
      pass computed.
    """
    next_unit = continuous_q.smoothed_target_action(key, model.actor(target_actor, items.next_obs),
                                                    config.target_noise, config.target_noise_clip)
    return model.critics.loss(params, critic, target_critic, items,
                              continuous_q.from_box(items.action, model.low, model.high), next_unit,
                              jnp.zeros(items.reward.shape, jnp.float32))


def td3_actor_loss(actor: Params, critic: Variables, model: TD3Model, obs: Array) -> Array:
    """TD3's actor loss (Fujimoto et al. 2018, alg. 1): the deterministic policy gradient's
    `-mean(Q1(s, mu(s)))` over `obs [N, ...]`, a scalar; `actor` differentiated, `critic` not
    (read as `Critics.q`: expected values, CrossQ's in evaluation mode)."""
    return continuous_q.td3_actor_loss(model.critics.q(critic, obs, model.actor(actor, obs))[0])


def make_td3(config: TD3Config, obs_spec: ObservationSpec, action_spec: BoxSpec, *, num_updates: int,
             axis_name: parallel.AxisName = None) -> Agent:
    """Build the TD3 `Agent`.

    num_updates: unused (no schedule depends on the run's length).
    axis_name:   mesh axis (or axes) to average gradients over; None on one device.
    """
    del num_updates
    dim = networks.action_dim(tuple(action_spec.shape))
    check_buffer_fits(config, obs_spec, action_spec)
    actor_net = networks.DeterministicActor(dim, networks.make_torso(config))
    critics = make_critics(config, axis_name)
    actor_opt = optax.adam(config.actor_learning_rate, b1=config.adam_b1)
    critic_opt = optax.adam(config.critic_learning_rate, b1=config.adam_b1)
    low, high = jnp.asarray(action_spec.low), jnp.asarray(action_spec.high)
    replay = make_buffer(config)

    model = TD3Model(actor_net.apply, critics, low, high)

    def critic_loss(params: Params, actor: Params, learner: ContinuousLearnerState, items: Transition,
                    key: PRNGKey):
        # CrossQ keeps no target networks: the online actor's action is smoothed instead
        target_actor = learner.extra if critics.has_target else actor
        return td3_critic_loss(params, learner.critic, learner.target_critic, target_actor, model, items, key, config)

    def actor_loss(actor: Params, critic: Variables, obs: Array):
        return td3_actor_loss(actor, critic, model, obs)

    def target_update(online: Params, target: Params) -> Params:
        """Target networks Polyak-averaged towards `online` (none for CrossQ)."""
        return optax.incremental_update(online, target, config.tau) if critics.has_target else target

    critic_grad = parallel.value_and_mean_grad(critic_loss, axis_name, has_aux=True)
    actor_grad = parallel.value_and_mean_grad(actor_loss, axis_name)

    def learn_on_batch(actor: Params, learner: ContinuousLearnerState, items: Transition, key: PRNGKey):
        (loss, (q_mean, critic)), grads = critic_grad(trainable(learner.critic), actor, learner, items, key)
        updates, critic_opt_state = critic_opt.update(grads, learner.critic_optimizer, trainable(critic))
        critic = {**critic, **optax.apply_updates(trainable(critic), updates)}
        steps = learner.gradient_steps.add(1)
        # the actor and the targets move on every policy_delay-th step (alg. 1), counted from 1
        due = steps.mod(config.policy_delay) == 0
        a_loss, grads = actor_grad(actor, critic, items.obs)
        updates, actor_opt_state = actor_opt.update(grads, learner.actor_optimizer, actor)
        new_actor = optax.apply_updates(actor, updates)
        new = (new_actor, actor_opt_state, target_update(new_actor, learner.extra),
               target_update(critic, learner.target_critic))
        old = (actor, learner.actor_optimizer, learner.extra, learner.target_critic)
        actor, actor_opt_state, target_actor, target_critic = jax.tree.map(
            lambda n, o: jnp.where(due, n, o), new, old)
        learner = learner._replace(critic=critic, critic_optimizer=critic_opt_state, actor_optimizer=actor_opt_state,
                                   extra=target_actor, target_critic=target_critic, gradient_steps=steps)
        metrics = {"loss": loss, "actor_loss": a_loss, "q_mean": q_mean, "actor_updated": due.astype(jnp.float32)}
        return actor, learner, metrics

    def init(key: PRNGKey):
        actor_key, critic_key = jax.random.split(key)
        obs = jnp.asarray(zeros_like_spec(obs_spec, (1,)))
        actor = actor_net.init(actor_key, obs)
        critic = critics.init(critic_key, obs, jnp.zeros((1, dim), jnp.float32))
        targets = (critic, actor) if critics.has_target else ((), ())
        learner = ContinuousLearnerState(critic, targets[0], actor_opt.init(actor), critic_opt.init(trainable(critic)),
                                         targets[1], Count.zeros(), jnp.zeros((), jnp.float32), Count.zeros())
        return initial_state(actor, learner, replay, obs_spec, action_spec)

    def act(params: ContinuousParams, obs: Observation, key: PRNGKey) -> tuple[Array, dict[str, Array]]:
        """The actor's action plus N(0, exploration_noise) in unit-box units, clipped to the
        box (uniform in the box before learning_starts)."""
        noise_key, random_key = jax.random.split(key)
        unit = actor_net.apply(params.actor, obs)
        unit = jnp.clip(unit + config.exploration_noise * jax.random.normal(noise_key, unit.shape), -1.0, 1.0)
        return random_until_learning(config, action_spec, params, random_key, continuous_q.to_box(unit, low, high)), {}

    def greedy_act(params: ContinuousParams, obs: Observation) -> Array:
        """The actor's action in the box, without noise (evaluation)."""
        return continuous_q.to_box(actor_net.apply(params.actor, obs), low, high)

    update = make_replay_update(config, replay, learn_on_batch, axis_name, STEP_METRICS, "td3")
    return Agent(init=init, act=act, update=update, greedy_act=greedy_act)


def _probe_config() -> TD3Config:
    return TD3Config(actor_learning_rate=1e-3, critic_learning_rate=3e-3, buffer_size=4_096, batch_size=64,
                     gradient_steps=8, policy_delay=1, learning_starts=512, hidden_sizes=(32, 32), gamma=0.9)


def _exact_config(config: TD3Config, batch: BatchShape) -> TD3Config:
    """One gradient step on a sample that is the whole batch however it is split (stratified
    sampling of `N` items from a device holding `N / D` takes each `D` times), without
    target smoothing's noise, the actor updated on that step."""
    n = batch.transitions
    return dataclasses.replace(config, sampling="stratified", buffer_size=max(config.buffer_size, n), batch_size=n,
                               gradient_steps=1, replay_ratio=None, learning_starts=0, n_step=1, target_noise=0.0,
                               policy_delay=1)


ALGORITHM = Algorithm(
    name="td3", config=TD3Config, make=make_td3, check_batch=TD3Config.check_batch, action_spaces=(BoxSpec,),
    probe_config=_probe_config, probe_steps=20_000, exact_config=_exact_config, step_metrics=STEP_METRICS,
)
