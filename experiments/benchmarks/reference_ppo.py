"""A hand-written single-file PPO (the PureJaxRL recipe: jit + vmap + scan) to time podracer
against: what a researcher writes by hand for one gymnax environment on one device.

It reads its hyperparameters from a podracer PPO config (so `bench anakin
--compare-reference` runs it with the preset's numbers) but shares no code with podracer:
gymnax's own step and auto-reset, `terminated | truncated` as the end of bootstrapping
(PureJaxRL's simplification: no bootstrap on a time limit), GAE by a
reverse scan, per-minibatch advantage normalisation, a clipped value loss, separate actor
and critic MLPs. Per update it reports the loss and the return of finished episodes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu}


class ActorCritic(nn.Module):
    num_actions: int
    hidden_sizes: tuple[int, ...]
    activation: str

    @nn.compact
    def __call__(self, obs):
        x = obs.reshape(obs.shape[0], -1).astype(jnp.float32)
        act = ACTIVATIONS[self.activation]
        init = nn.initializers.orthogonal
        actor, critic = x, x
        for size in self.hidden_sizes:
            actor = act(nn.Dense(size, kernel_init=init(np.sqrt(2)))(actor))
            critic = act(nn.Dense(size, kernel_init=init(np.sqrt(2)))(critic))
        logits = nn.Dense(self.num_actions, kernel_init=init(0.01))(actor)
        value = nn.Dense(1, kernel_init=init(1.0))(critic)
        return logits, value[:, 0]


class RunnerState(NamedTuple):
    params: Any
    opt_state: Any
    env_state: Any
    obs: jax.Array
    episode_return: jax.Array  # [B] running undiscounted return
    key: jax.Array


class Transition(NamedTuple):
    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    done: jax.Array
    log_prob: jax.Array
    value: jax.Array


def make_reference(env_id: str, ppo: Any, num_envs: int, rollout_length: int, num_updates: int,
                   num_seeds: int = 1):
    """`(init(key) -> state, train(state, n) -> (state, metrics))`; `train` is jitted and runs
    `n` rollout+update iterations in one `fori_loop` (state donated). With `num_seeds > 1`
    the state has a leading seed axis and `train` is vmapped over it (parameters are
    initialised one seed at a time: a vmapped orthogonal init can deadlock on CPU)."""
    env, env_params = gymnax.make(env_id)
    network = ActorCritic(env.num_actions, tuple(ppo.hidden_sizes), ppo.activation)
    steps = num_updates * ppo.num_epochs * ppo.num_minibatches
    lr = optax.linear_schedule(ppo.learning_rate, 0.0, steps) if ppo.anneal_lr else ppo.learning_rate
    tx = optax.chain(optax.clip_by_global_norm(ppo.max_grad_norm), optax.adam(lr, eps=ppo.adam_eps))
    batch = num_envs * rollout_length
    minibatch = batch // ppo.num_minibatches

    def init(key):
        net_key, env_key, key = jax.random.split(key, 3)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(env_key, num_envs), env_params)
        params = network.init(net_key, obs[:1])
        return RunnerState(params, tx.init(params), env_state, obs, jnp.zeros(num_envs), key)

    def env_step(carry, key):
        params, env_state, obs, episode_return = carry
        act_key, step_key = jax.random.split(key)
        logits, value = network.apply(params, obs)
        action = jax.random.categorical(act_key, logits)
        log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], -1)[:, 0]
        next_obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(step_key, num_envs), env_state, action, env_params)
        done = terminated | truncated
        episode_return = episode_return + reward
        finished = (jnp.sum(jnp.where(done, episode_return, 0.0)), jnp.sum(done))
        episode_return = jnp.where(done, 0.0, episode_return)
        return (params, env_state, next_obs, episode_return), (Transition(obs, action, reward, done, log_prob, value),
                                                              finished)

    def gae(traj: Transition, last_value):
        def backward(carry, t):
            advantage, next_value = carry
            not_done = 1.0 - t.done
            delta = t.reward + ppo.gamma * next_value * not_done - t.value
            advantage = delta + ppo.gamma * ppo.gae_lambda * not_done * advantage
            return (advantage, t.value), advantage

        _, advantages = jax.lax.scan(backward, (jnp.zeros_like(last_value), last_value), traj, reverse=True)
        return advantages, advantages + traj.value

    def loss_fn(params, mb):
        traj, advantage, target = mb
        logits, value = network.apply(params, traj.obs)
        log_probs = jax.nn.log_softmax(logits)
        log_prob = jnp.take_along_axis(log_probs, traj.action[:, None], -1)[:, 0]
        clipped_value = traj.value + jnp.clip(value - traj.value, -ppo.clip_eps, ppo.clip_eps)
        value_loss = 0.5 * jnp.mean(jnp.maximum(jnp.square(value - target), jnp.square(clipped_value - target)))
        ratio = jnp.exp(log_prob - traj.log_prob)
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        pg_loss = -jnp.mean(jnp.minimum(ratio * advantage,
                                        jnp.clip(ratio, 1 - ppo.clip_eps, 1 + ppo.clip_eps) * advantage))
        entropy = -jnp.mean(jnp.sum(jnp.exp(log_probs) * log_probs, -1))
        return pg_loss + ppo.value_coef * value_loss - ppo.entropy_coef * entropy

    def sgd_step(carry, mb):
        params, opt_state = carry
        loss, grads = jax.value_and_grad(loss_fn)(params, mb)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    def epoch(carry, key):
        params, opt_state, data = carry
        permutation = jax.random.permutation(key, batch)
        shuffled = jax.tree.map(lambda x: x.reshape((batch,) + x.shape[2:])[permutation], data)
        minibatches = jax.tree.map(lambda x: x.reshape((ppo.num_minibatches, minibatch) + x.shape[1:]), shuffled)
        (params, opt_state), losses = jax.lax.scan(sgd_step, (params, opt_state), minibatches)
        return (params, opt_state, data), losses

    def update(_, carry):
        state, return_sum, episodes, loss_sum = carry
        key, rollout_key, epoch_key = jax.random.split(state.key, 3)
        (_, env_state, obs, episode_return), (traj, (returns, dones)) = jax.lax.scan(
            env_step, (state.params, state.env_state, state.obs, state.episode_return),
            jax.random.split(rollout_key, rollout_length))
        _, last_value = network.apply(state.params, obs)
        advantage, target = gae(traj, last_value)
        (params, opt_state, _), losses = jax.lax.scan(
            epoch, (state.params, state.opt_state, (traj, advantage, target)),
            jax.random.split(epoch_key, ppo.num_epochs))
        state = RunnerState(params, opt_state, env_state, obs, episode_return, key)
        return state, return_sum + returns.sum(), episodes + dones.sum(), loss_sum + losses.mean()

    def train(state: RunnerState, num_updates: jax.Array):
        zero = jnp.zeros(())
        state, return_sum, episodes, loss_sum = jax.lax.fori_loop(
            0, num_updates, update, (state, zero, jnp.zeros((), jnp.int32), zero))
        return state, {"return_sum": return_sum, "episodes": episodes, "loss": loss_sum / num_updates}

    init_one = jax.jit(init)
    if num_seeds == 1:
        return init_one, jax.jit(train, donate_argnums=0)

    def init_seeds(key):
        states = [init_one(k) for k in jax.random.split(key, num_seeds)]
        return jax.tree.map(lambda *xs: jnp.stack(xs), *states)

    return init_seeds, jax.jit(jax.vmap(train, in_axes=(0, None)), donate_argnums=0)
