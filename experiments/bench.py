"""`podracer bench`: training throughput against the physical limit of this machine, and
(`--compare-reference`) against a hand-written single-file PPO with the same hyperparameters."""

from __future__ import annotations

import math
import time
from typing import Any

import jax
import jax.numpy as jnp

from anakin import program, runner
from anakin.runner import select_devices
from podracer.agents import PPOConfig
from podracer.agents.muzero import without_search
from podracer.config import Config, ConfigError
from podracer.envs.gymnax_env import GYMNAX_IDS


def _timed_calls(call: Any, state: Any, n: int, repeats: int, warmup: int = 1) -> tuple[Any, float]:
    """Run `call(state, n)` `repeats` times; wall seconds per call (after `warmup` calls)."""
    for _ in range(warmup):
        state, out = call(state, jnp.int32(n))
    jax.block_until_ready(out)
    start = time.perf_counter()
    for _ in range(repeats):
        state, out = call(state, jnp.int32(n))
    jax.block_until_ready((state, out))
    return state, (time.perf_counter() - start) / repeats


class _Timed:
    """A compiled `call(state, n) -> (state, out)` and its state, timed call by call."""

    def __init__(self, call: Any, state: Any):
        self.call, self.state, self.seconds = call, state, []

    def run(self, n: int, record: bool = True) -> None:
        start = time.perf_counter()
        self.state, out = self.call(self.state, jnp.int32(n))
        jax.block_until_ready((self.state, out))
        if record:
            self.seconds.append(time.perf_counter() - start)


def _compiled(jitted: Any, state: Any, n: int) -> tuple[Any, float]:
    start = time.perf_counter()
    compiled = jitted.lower(state, jnp.int32(n)).compile()
    return compiled, time.perf_counter() - start


def bench_anakin(config: Config, repeats: int = 5, compare_reference: bool = False) -> dict[str, Any]:
    """Steady-state training env steps/s (`sps`), compile excluded, and `limit_sps`: the
    same env batch and network acting only, no learning. For a search agent (MuZero),
    `limit_sps` acts with the search and `limit_sps_without_search` with the prediction
    network alone; `search_cost` is their ratio. With `compare_reference`, the
    hand-written PPO (`experiments.benchmarks.reference_ppo`) runs the same updates per call
    and its calls alternate with podracer's, so that both see the same machine load:
    `reference_sps`, `speedup` (podracer / reference) and both compile times."""
    if compare_reference:
        _check_reference(config)
    s = runner.setup(config)
    arch = config.arch
    n = arch.updates_per_call
    steps_per_call = n * s.sizes.steps_per_update * arch.num_seeds
    state = runner.initial_state(config, s)
    train_call = program.make_train_call(s.env, s.env_params, s.agent, s.mesh, arch.rollout_length)
    compiled, compile_s = _compiled(train_call, state, n)
    warmup = warmup_calls(config, n * s.sizes.steps_per_update)
    if not compare_reference:
        state, train_s = _timed_calls(compiled, state, n, repeats, warmup)
        state, rollout_s = _rollout_seconds(config, s, state, n, repeats)
        result = _result(config, s, steps_per_call, train_s, rollout_s, compile_s, warmup)
        result.update(_without_search(config, s, state, n, repeats, steps_per_call, rollout_s))
        return result

    ours = _Timed(compiled, state)
    reference, reference_compile_s = _reference_call(config, s.sizes.num_updates, n)
    for _ in range(warmup):
        ours.run(n, record=False)
    reference.run(n, record=False)  # PPO: one warm-up
    for _ in range(repeats):
        for timed in (ours, reference):
            timed.run(n)
    train_s, reference_s = sum(ours.seconds) / repeats, sum(reference.seconds) / repeats
    _, rollout_s = _rollout_seconds(config, s, ours.state, n, repeats)
    result = _result(config, s, steps_per_call, train_s, rollout_s, compile_s, warmup)
    reference_sps = steps_per_call / reference_s
    result.update(reference_sps=round(reference_sps, 1), speedup=round(result["sps"] / reference_sps, 3),
                  reference_compile_s=round(reference_compile_s, 2))
    return result


def warmup_calls(config: Config, steps_per_call: int) -> int:
    """Untimed calls before timing: one (compilation's last costs), or as many as it takes
    to pass the agent's `learning_starts` (env steps per seed, as `steps_per_call`): a
    replay agent takes no gradient step before, so timing earlier would time acting alone."""
    return max(1, math.ceil(getattr(config.agent, "learning_starts", 0) / steps_per_call))


def _check_reference(config: Config) -> None:
    """What the hand-written reference can run; a ConfigError, before anything compiles."""
    ppo = config.agent
    if not isinstance(ppo, PPOConfig) or ppo.advantage != "gae" or ppo.torso != "mlp" or ppo.shared_torso:
        raise ConfigError("--compare-reference: the reference is PPO with GAE and separate MLP actor and critic; "
                          "the preset is not")
    if config.env.id not in GYMNAX_IDS or len(runner_devices(config)) != 1:
        raise ConfigError("--compare-reference: the reference runs a gymnax environment on one device "
                          "(use --arch.devices 0 with several)")


def _reference_call(config: Config, num_updates: int, n: int) -> tuple[_Timed, float]:
    # Here, not at the top: the reference imports gymnax (about 1.8 s), which `podracer --help` need not load.
    from experiments.benchmarks.reference_ppo import make_reference

    ppo = config.agent
    init, train = make_reference(config.env.id, ppo, config.arch.num_envs, config.arch.rollout_length,
                                 num_updates, config.arch.num_seeds)
    state = init(jax.random.key(config.seed))
    compiled, compile_s = _compiled(train, state, n)
    return _Timed(compiled, state), compile_s


def runner_devices(config: Config) -> list:
    return select_devices(config.arch.devices)


def _rollout_seconds(config: Config, s: Any, state: Any, n: int, repeats: int) -> tuple[Any, float]:
    rollout_call = program.make_rollout_call(s.env, s.env_params, s.agent, s.mesh, config.arch.rollout_length)
    return _timed_calls(rollout_call, state, n, repeats)


def _without_search(config: Config, s: Any, state: Any, n: int, repeats: int, steps_per_call: int,
                    rollout_s: float) -> dict[str, Any]:
    """For a search agent (MuZero): `limit_sps_without_search`, acting with the prediction
    network alone on the same envs, and `search_cost` (how many times slower the search
    acts); nothing for other agents."""
    prior = without_search(s.agent, config.agent, s.env.observation_spec(s.env_params),
                           s.env.action_spec(s.env_params))
    if prior is None:
        return {}
    prior_call = program.make_rollout_call(s.env, s.env_params, prior, s.mesh, config.arch.rollout_length)
    _, prior_s = _timed_calls(prior_call, state, n, repeats)
    return {"limit_sps_without_search": round(steps_per_call / prior_s, 1),
            "search_cost": round(rollout_s / prior_s, 2)}


def _result(config: Config, s: Any, steps_per_call: int, train_s: float, rollout_s: float,
            compile_s: float, warmup: int) -> dict[str, Any]:
    sps, limit_sps = steps_per_call / train_s, steps_per_call / rollout_s
    return {
        "arch": "anakin",
        "env": config.env.id,
        "sps": round(sps, 1),
        "limit_sps": round(limit_sps, 1),
        "ratio": round(sps / limit_sps, 4),
        "compile_s": round(compile_s, 2),
        "warmup_calls": warmup,
        # On, a program compiled before loads from JAX's persistent cache: compile_s is then that load.
        "compilation_cache": bool(jax.config.jax_compilation_cache_dir),
        "devices": s.sizes.num_devices,
        "num_envs": config.arch.num_envs,
        "num_seeds": config.arch.num_seeds,
        "backend": jax.default_backend(),
    }
