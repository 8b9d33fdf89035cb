"""A hand-written single-file SAC (jit + vmap + scan, CleanRL's JAX SAC recipe) to time
podracer's SAC against: what a researcher writes by hand for one gymnax environment on one
device.

It reads its hyperparameters from a podracer `SACConfig` (networks `hidden_sizes`, batch,
learning rates, tau, gamma) and the Anakin layout (`num_envs`, `rollout_length`, gradient
steps per iteration from the replay ratio) but shares no code with podracer: gymnax's own
step and auto-reset, a ring buffer of jnp arrays, 1-step targets with `terminated` as the only
end of bootstrapping, a tanh-Gaussian actor, two critics vmapped over stacked parameters,
automatic temperature, Polyak targets every step.

`python -m experiments.benchmarks.reference_sac [PRESET] [--repeats N]` times both, calls
alternating so that both see the same machine load, and prints gradient steps per second of
each and their ratio (podracer / reference) as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any, NamedTuple

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import optax

from anakin import program, runner
from experiments.presets import get

INIT = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


class Actor(nn.Module):
    action_dim: int
    hidden_sizes: tuple[int, ...]

    @nn.compact
    def __call__(self, obs):
        x = obs
        for size in self.hidden_sizes:
            x = nn.relu(nn.Dense(size, kernel_init=INIT)(x))
        mean = nn.Dense(self.action_dim, kernel_init=INIT)(x)
        log_std = jnp.tanh(nn.Dense(self.action_dim, kernel_init=INIT)(x))
        return mean, -5.0 + 3.5 * (log_std + 1.0)


class QNetwork(nn.Module):
    hidden_sizes: tuple[int, ...]

    @nn.compact
    def __call__(self, obs, action):
        x = jnp.concatenate([obs, action], -1)
        for size in self.hidden_sizes:
            x = nn.relu(nn.Dense(size, kernel_init=INIT)(x))
        return nn.Dense(1, kernel_init=INIT)(x)[..., 0]


class State(NamedTuple):
    actor: Any
    critic: Any  # two critics' parameters stacked on a leading axis
    target: Any
    log_alpha: jax.Array
    opt: Any
    buffer: Any  # (obs, action, reward, done, next_obs), each [capacity, ...]
    index: jax.Array
    size: jax.Array
    env_state: Any
    obs: jax.Array
    key: jax.Array


def make_reference(env_id: str, config: Any, num_envs: int, rollout_length: int):
    """`(init(key) -> State, train(state, n) -> (state, critic losses [n]))`: each of the `n`
    iterations steps `num_envs` envs `rollout_length` times, adds the steps to the buffer and
    takes `gradient_steps` SAC steps (`config.steps_per_update(num_envs * rollout_length)`,
    rounded up)."""
    env, env_params = gymnax.make(env_id)
    space = env.action_space(env_params)
    low, high = jnp.asarray(space.low, jnp.float32), jnp.asarray(space.high, jnp.float32)
    obs_dim = env.observation_space(env_params).shape[0]
    dim = space.shape[0]
    hidden = tuple(config.hidden_sizes)
    actor_net, q_net = Actor(dim, hidden), QNetwork(hidden)
    twin_q = jax.vmap(q_net.apply, in_axes=(0, None, None))
    capacity, batch = config.buffer_size, config.batch_size
    grad_steps = math.ceil(config.steps_per_update(num_envs * rollout_length))
    actor_opt, critic_opt = optax.adam(config.actor_learning_rate), optax.adam(config.critic_learning_rate)
    alpha_opt = optax.adam(config.temperature_learning_rate)
    scale = (high - low) / 2.0
    target_entropy = -float(dim)

    def sample(actor, obs, key):
        mean, log_std = actor_net.apply(actor, obs)
        u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
        log_prob = jnp.sum(-0.5 * ((u - mean) / jnp.exp(log_std)) ** 2 - log_std - 0.5 * jnp.log(2 * jnp.pi)
                           - jnp.log(scale * (1 - jnp.tanh(u) ** 2) + 1e-6), -1)
        return jnp.tanh(u), log_prob

    def init(key):
        k_actor, k_critic, k_env, key = jax.random.split(key, 4)
        obs0, a0 = jnp.zeros((1, obs_dim)), jnp.zeros((1, dim))
        actor = actor_net.init(k_actor, obs0)
        critic = jax.vmap(lambda k: q_net.init(k, obs0, a0))(jax.random.split(k_critic, 2))
        log_alpha = jnp.zeros(())
        opt = (actor_opt.init(actor), critic_opt.init(critic), alpha_opt.init(log_alpha))
        buffer = (jnp.zeros((capacity, obs_dim)), jnp.zeros((capacity, dim)), jnp.zeros(capacity),
                  jnp.zeros(capacity), jnp.zeros((capacity, obs_dim)))
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_env, num_envs), env_params)
        return State(actor, critic, critic, log_alpha, opt, buffer, jnp.int32(0), jnp.int32(0), env_state, obs, key)

    def env_step(carry, _):
        state, key = carry
        key, k_act, k_step = jax.random.split(key, 3)
        unit, _ = sample(state.actor, state.obs, k_act)
        action = low + (unit + 1.0) * scale
        obs, env_state, reward, terminated, _, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_step, num_envs), state.env_state, action, env_params)
        # gymnax auto-resets: a finished episode's next observation is the new one's first
        # (the hand-written simplification); only termination stops bootstrapping
        step = (state.obs, unit, reward, terminated.astype(jnp.float32), obs)
        return (state._replace(env_state=env_state, obs=obs), key), step

    def learn(state, key):
        k_sample, k_next, k_actor = jax.random.split(key, 3)
        idx = jax.random.randint(k_sample, (batch,), 0, jnp.maximum(state.size, 1))
        obs, action, reward, done, next_obs = jax.tree.map(lambda x: x[idx], state.buffer)
        alpha = jnp.exp(state.log_alpha)
        next_action, next_log_prob = sample(state.actor, next_obs, k_next)
        q_next = jnp.min(twin_q(state.target, next_obs, next_action), 0) - alpha * next_log_prob
        target = reward + config.gamma * (1 - done) * q_next

        def critic_loss(critic):
            q = twin_q(critic, obs, action)
            return jnp.sum(jnp.mean((q - target) ** 2, -1))

        loss, grads = jax.value_and_grad(critic_loss)(state.critic)
        updates, critic_opt_state = critic_opt.update(grads, state.opt[1], state.critic)
        critic = optax.apply_updates(state.critic, updates)

        def actor_loss(actor):
            a, log_prob = sample(actor, obs, k_actor)
            return jnp.mean(alpha * log_prob - jnp.min(twin_q(critic, obs, a), 0)), log_prob

        (_, log_prob), grads = jax.value_and_grad(actor_loss, has_aux=True)(state.actor)
        updates, actor_opt_state = actor_opt.update(grads, state.opt[0], state.actor)
        actor = optax.apply_updates(state.actor, updates)
        alpha_grad = jax.grad(lambda la: -jnp.mean(jnp.exp(la) * (log_prob + target_entropy)))(state.log_alpha)
        updates, alpha_opt_state = alpha_opt.update(alpha_grad, state.opt[2], state.log_alpha)
        target_params = optax.incremental_update(critic, state.target, config.tau)
        return state._replace(actor=actor, critic=critic, target=target_params,
                              log_alpha=optax.apply_updates(state.log_alpha, updates),
                              opt=(actor_opt_state, critic_opt_state, alpha_opt_state)), loss

    def iteration(state, _):
        (state, key), steps = jax.lax.scan(env_step, (state, state.key), None, rollout_length)
        steps = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), steps)
        n = num_envs * rollout_length
        slots = (state.index + jnp.arange(n)) % capacity
        buffer = jax.tree.map(lambda b, s: b.at[slots].set(s), state.buffer, steps)
        state = state._replace(buffer=buffer, index=(state.index + n) % capacity,
                               size=jnp.minimum(state.size + n, capacity))
        key, learn_key = jax.random.split(key)
        state, losses = jax.lax.scan(learn, state, jax.random.split(learn_key, grad_steps))
        return state._replace(key=key), jnp.mean(losses)

    def train(state, n):
        return jax.lax.scan(iteration, state, None, length=n)

    return init, jax.jit(train, static_argnums=1), grad_steps


def compare(preset: str, repeats: int = 5) -> dict[str, Any]:
    """Gradient steps per second of podracer's Anakin SAC preset (one seed, one device) and of
    the reference with the same networks, batch and steps per iteration, their calls
    alternating; `speedup` is podracer's over the reference's."""
    config = get(preset, arch=dict(devices=(0,), num_seeds=1))
    s = runner.setup(config)
    n = config.arch.updates_per_call
    state = runner.initial_state(config, s)
    call = jax.jit(program.make_train_call(s.env, s.env_params, s.agent, s.mesh, config.arch.rollout_length))
    init, train, grad_steps = make_reference(config.env.id, config.agent, config.arch.num_envs,
                                             config.arch.rollout_length)
    reference = init(jax.random.key(0))
    warmup = max(1, math.ceil(config.agent.learning_starts / (n * s.sizes.steps_per_update)))
    for _ in range(warmup + 1):  # past learning_starts: every timed update learns
        state, out = call(state, jnp.int32(n))
    reference, losses = train(reference, n)
    jax.block_until_ready((state, out, reference, losses))
    ours_s, reference_s = 0.0, 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        state, out = call(state, jnp.int32(n))
        jax.block_until_ready((state, out))
        ours_s += time.perf_counter() - start
        start = time.perf_counter()
        reference, losses = train(reference, n)
        jax.block_until_ready((reference, losses))
        reference_s += time.perf_counter() - start
    steps = repeats * n * grad_steps
    return {"preset": preset, "gradient_steps_per_call": n * grad_steps, "batch_size": config.agent.batch_size,
            "hidden_sizes": list(config.agent.hidden_sizes),
            "podracer_grad_steps_per_s": round(steps / ours_s, 1),
            "reference_grad_steps_per_s": round(steps / reference_s, 1),
            "speedup": round(reference_s / ours_s, 3), "device": jax.devices()[0].device_kind}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset", nargs="?", default="sac-pendulum-anakin")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(compare(args.preset, args.repeats)))


if __name__ == "__main__":
    main()
