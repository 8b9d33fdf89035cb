"""`podracer bench`: training throughput against the physical limit of this machine."""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp

from podracer.config import Config


def _timed_calls(call: Any, state: Any, n: int, repeats: int) -> tuple[Any, float]:
    """Run `call(state, n)` `repeats` times; wall seconds per call (after one warm-up)."""
    state, out = call(state, jnp.int32(n))
    jax.block_until_ready(out)
    start = time.perf_counter()
    for _ in range(repeats):
        state, out = call(state, jnp.int32(n))
    jax.block_until_ready((state, out))
    return state, (time.perf_counter() - start) / repeats


def bench_anakin(config: Config, repeats: int = 5) -> dict[str, Any]:
    """Steady-state training env steps/s (`sps`), compile excluded, and `limit_sps`: the
    same env batch and network acting only, no learning. For a search agent (MuZero),
    `limit_sps` acts with the search and `limit_sps_without_search` with the prediction
    network alone; `search_cost` is their ratio."""
    from anakin import program, runner
    from podracer.agents.muzero import without_search

    s = runner.setup(config)
    arch = config.arch
    n = arch.updates_per_call
    steps_per_call = n * s.sizes.steps_per_update * arch.num_seeds

    state = runner.initial_state(config, s)
    start = time.perf_counter()
    train_call = program.make_train_call(s.env, s.env_params, s.agent, s.mesh, arch.rollout_length)
    compiled = train_call.lower(state, jnp.int32(n)).compile()
    compile_s = time.perf_counter() - start
    state, train_s = _timed_calls(compiled, state, n, repeats)

    rollout_call = program.make_rollout_call(s.env, s.env_params, s.agent, s.mesh, arch.rollout_length)
    state, rollout_s = _timed_calls(rollout_call, state, n, repeats)
    sps, limit_sps = steps_per_call / train_s, steps_per_call / rollout_s
    extra: dict[str, Any] = {}
    prior = without_search(s.agent, config.agent, s.env.observation_spec(s.env_params),
                           s.env.action_spec(s.env_params))
    if prior is not None:
        prior_call = program.make_rollout_call(s.env, s.env_params, prior, s.mesh, arch.rollout_length)
        state, prior_s = _timed_calls(prior_call, state, n, repeats)
        extra = {"limit_sps_without_search": round(steps_per_call / prior_s, 1),
                 "search_cost": round(rollout_s / prior_s, 2)}
    return {
        "arch": "anakin",
        "env": config.env.id,
        "sps": round(sps, 1),
        "limit_sps": round(limit_sps, 1),
        "ratio": round(sps / limit_sps, 4),
        **extra,
        "compile_s": round(compile_s, 2),
        "devices": s.sizes.num_devices,
        "num_envs": arch.num_envs,
        "num_seeds": arch.num_seeds,
        "backend": jax.default_backend(),
    }
