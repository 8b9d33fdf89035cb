"""Env steps per second of the prefix-adder JAX environment: a vmapped batch stepped under
`jit` + `lax.scan` with random legal actions (sampled from the action mask), auto-resets
included. `python -m experiments.prefix.env_bench 16 32` prints one JSON line per width and
reset mode."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from experiments.prefix.env import PrefixAdderEnv


def bench_prefix_env(bits: int = 16, num_envs: int = 256, steps: int = 64, repeats: int = 3,
                     reset: str = "mixed") -> dict:
    """`{"bits", "num_envs", "sps", ...}`: steady-state env steps/s (compile excluded)."""
    env = PrefixAdderEnv(bits, reset=reset)

    def random_step(carry, key):
        state, obs = carry
        act_key, step_key = jax.random.split(key)
        # A uniformly random legal action from one uniform per env: the k-th legal action.
        legal = jnp.cumsum(obs.action_mask, axis=-1)
        k = jnp.floor(jax.random.uniform(act_key, (num_envs,)) * legal[:, -1]).astype(jnp.int32)
        action = jax.vmap(lambda counts, k: jnp.searchsorted(counts, k, side="right"))(legal, k)
        state, timestep = jax.vmap(env.step)(jax.random.split(step_key, num_envs), state, action)
        return (state, timestep.obs), timestep.reward.mean()

    @jax.jit
    def run(carry, key):
        keys = jax.random.split(key, steps)
        return jax.lax.scan(random_step, carry, keys)

    reset_keys = jax.random.split(jax.random.key(0), num_envs)
    carry = jax.jit(jax.vmap(env.reset))(reset_keys)
    start = time.perf_counter()
    carry, _ = jax.block_until_ready(run(carry, jax.random.key(1)))
    compile_s = time.perf_counter() - start
    best = float("inf")
    for r in range(repeats):
        start = time.perf_counter()
        carry, _ = jax.block_until_ready(run(carry, jax.random.key(2 + r)))
        best = min(best, time.perf_counter() - start)
    return {"bits": bits, "reset": reset, "num_envs": num_envs, "steps": steps, "sps": num_envs * steps / best,
            "first_call_s": compile_s}


if __name__ == "__main__":
    import json
    import sys

    bits = [int(b) for b in sys.argv[1:]] or [16, 32]
    for b in bits:
        for reset in ("mixed", "ripple"):
            print(json.dumps(bench_prefix_env(b, reset=reset)))
