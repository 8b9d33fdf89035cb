"""Env steps/s of a suite's environment alone (no agent): podracer's adapter, stepped as
Anakin steps it (`podracer.envs.base.step_batch`: auto-reset, truncation, final
observations, resets computed only when an episode ended on CPU), against the suite's own
`vmap`ped step loop with the suite's own auto-reset. Both run `steps` steps of `num_envs`
environments with uniformly random actions inside one jitted `lax.scan`, compile excluded.

    python -m experiments.benchmarks.suite_env_sps navix/Navix-Empty-5x5-v0 --num-envs 64
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp

from podracer.config import EnvConfig
from podracer.envs import make_configured_jax_env
from podracer.envs.base import step_batch

# Each suite is an optional extra, imported where its loop is built.


def _actions(key: jax.Array, num_envs: int, num_actions: int) -> jax.Array:
    return jax.random.randint(key, (num_envs,), 0, num_actions)


def podracer_loop(env_id: str, num_envs: int, steps: int, vmap_step: bool = False) -> Callable[[jax.Array], Any]:
    """`key -> final states`: the adapter's `step_batch` over `steps` steps of `num_envs` envs
    (with `vmap_step`, `jax.vmap(env.step)`, which computes every environment's reset at every
    step: what `step_batch` saves)."""
    env = make_configured_jax_env(EnvConfig(env_id))
    params = env.default_params
    num_actions = env.action_spec(params).num_actions

    def run(key):
        state, _ = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)

        def body(state, key):
            action_key, step_key = jax.random.split(key)
            keys = jax.random.split(step_key, num_envs)
            actions = _actions(action_key, num_envs, num_actions)
            if vmap_step:
                state, timestep = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, actions, params)
            else:
                state, timestep = step_batch(env, keys, state, actions, params)
            return state, timestep.reward.sum()

        return jax.lax.scan(body, state, jax.random.split(key, steps))

    return run


def native_loop(env_id: str, num_envs: int, steps: int) -> Callable[[jax.Array], Any]:
    """`key -> final states`: the suite's own environment with its own auto-reset, `vmap`ped."""
    suite, name = env_id.split("/", 1)
    if suite == "navix":
        import navix

        env = navix.make(name)
        num_actions = len(env.action_set)
        reset = lambda key: env.reset(key)  # noqa: E731
        step = lambda key, timestep, action: env.step(timestep, action)  # noqa: E731 - navix's resets by itself
        reward = lambda timestep: timestep.reward  # noqa: E731
    elif suite == "xminigrid":
        import xminigrid
        from xminigrid.wrappers import GymAutoResetWrapper

        env, params = xminigrid.make(name)
        env = GymAutoResetWrapper(env)
        num_actions = env.num_actions(params)
        reset = lambda key: env.reset(params, key)  # noqa: E731
        step = lambda key, timestep, action: env.step(params, timestep, action)  # noqa: E731
        reward = lambda timestep: timestep.reward  # noqa: E731
    elif suite == "jumanji":
        import jumanji
        from jumanji.wrappers import AutoResetWrapper

        env = AutoResetWrapper(jumanji.make(name))
        num_actions = int(env.action_spec.num_values)
        reset = lambda key: env.reset(key)  # noqa: E731
        step = lambda key, carry, action: env.step(carry[0], action)  # noqa: E731
        reward = lambda carry: carry[1].reward  # noqa: E731
    elif suite == "craftax":
        from craftax.craftax_env import make_craftax_env_from_name

        env = make_craftax_env_from_name(name, auto_reset=True)
        params = env.default_params
        num_actions = env.num_actions
        reset = lambda key: env.reset(key, params)[1]  # noqa: E731
        step = lambda key, state, action: env.step(key, state, action, params)[1:3]  # noqa: E731
        reward = None
    else:
        raise ValueError(f"no native loop for {env_id!r}")

    def run(key):
        state = jax.vmap(reset)(jax.random.split(key, num_envs))

        def body(state, key):
            action_key, step_key = jax.random.split(key)
            out = jax.vmap(step)(jax.random.split(step_key, num_envs), state, _actions(action_key, num_envs,
                                                                                     num_actions))
            if reward is None:  # Craftax: (state, reward)
                return out[0], out[1].sum()
            return out, jnp.sum(reward(out))

        return jax.lax.scan(body, state, jax.random.split(key, steps))

    return run


def steps_per_second(run: Callable[[jax.Array], Any], num_envs: int, steps: int, repeats: int) -> float:
    """The best of `repeats` timed calls of the compiled `run`, in env steps/s."""
    compiled = jax.jit(run).lower(jax.random.key(0)).compile()
    jax.block_until_ready(compiled(jax.random.key(1)))
    best = float("inf")
    for repeat in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(jax.random.key(2 + repeat)))
        best = min(best, time.perf_counter() - start)
    return num_envs * steps / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_id")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vmap-step", action="store_true", help="also time podracer's adapter under a plain "
                        "vmap(env.step), resets computed at every step")
    args = parser.parse_args()
    ours = steps_per_second(podracer_loop(args.env_id, args.num_envs, args.steps), args.num_envs, args.steps,
                            args.repeats)
    native = steps_per_second(native_loop(args.env_id, args.num_envs, args.steps), args.num_envs, args.steps,
                              args.repeats)
    print(f"{args.env_id}: podracer {ours:,.0f} env steps/s, {args.env_id.split('/')[0]}'s own vmapped loop "
          f"{native:,.0f} env steps/s, ratio {ours / native:.2f} ({jax.default_backend()}, {args.num_envs} envs)")
    if args.vmap_step:
        plain = steps_per_second(podracer_loop(args.env_id, args.num_envs, args.steps, vmap_step=True),
                                 args.num_envs, args.steps, args.repeats)
        print(f"{args.env_id}: podracer under vmap(env.step) {plain:,.0f} env steps/s; step_batch is "
              f"{ours / plain:.2f}x that")


if __name__ == "__main__":
    main()
