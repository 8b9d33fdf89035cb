"""The designs a prefix-adder run reached: greedy rollouts of its latest checkpoint.

`podracer prefix-front RUN_DIR` on a training run (a directory with `config.json` and
checkpoints but no `designs.jsonl`) first calls `collect_run_designs`: the run's greedy
policy designs from ripple and Sklansky starts for a sweep of area weights w (the run's own
w when it trained with a fixed one), one episode each (the run's `env.max_episode_steps`,
else the environment's horizon), every graph visited along the way is costed in the run's
cost model (analytic, or synthesis through the reward pool and its cache) and written to
`RUN_DIR/designs.jsonl`; the front, plot and Verilog follow as for a search
(`experiments.prefix.fronts.show_front`).
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments import evaluate
from experiments import run_dir as run_dir_lib
from experiments.prefix.builders import sklansky
from experiments.prefix.cost_pools import make_pool
from experiments.prefix.env import PrefixAdderEnv, jax_form_options
from experiments.prefix.front import DESIGNS_FILE, Design, write_designs
from experiments.prefix.graph import empty_graph
from experiments.prefix.host_env import host_options, parse_host_id
from podracer.config import ConfigError

STARTS = ("ripple", "sklansky")


def is_prefix_run(directory: str) -> bool:
    """A run directory (its `config.json`) without a designs file yet."""
    return (os.path.isfile(os.path.join(directory, "config.json"))
            and not os.path.exists(os.path.join(directory, DESIGNS_FILE)))


def greedy_graphs(env: PrefixAdderEnv, policy: Any, params: Any, weights: np.ndarray) -> np.ndarray:
    """`bool [G, N, N]`: the distinct graphs greedy episodes visit (starts included), one
    episode per (start in `STARTS`, w in `weights`), all in one jitted scan."""
    starts = np.stack([empty_graph(env.bits), sklansky(env.bits)])
    nodes = jnp.asarray(np.repeat(starts, len(weights), axis=0))
    w = jnp.asarray(np.tile(weights, len(STARTS)), jnp.float32)

    @jax.jit
    def rollout(params, nodes, w):
        state, obs = jax.vmap(env.make_state)(nodes, w)

        def step(carry, key):
            state, obs = carry
            action, _ = policy.act(params, obs, key, None, None)  # DQN: feed-forward
            state, obs, _, _ = jax.vmap(env.step_env, in_axes=(None, 0, 0, None))(key, state, action, None)
            return (state, obs), state.nodes

        keys = jax.random.split(jax.random.key(0), env.horizon)
        _, visited = jax.lax.scan(step, (state, obs), keys)
        return jnp.concatenate([nodes[None], visited])

    visited = np.asarray(rollout(params, nodes, w)).reshape(-1, env.bits, env.bits)
    return np.unique(visited, axis=0)


def collect_run_designs(run_dir: str, num_weights: int = 11, agent_seed: int = 0) -> dict[str, Any]:
    """Write `RUN_DIR/designs.jsonl` from greedy rollouts of the run's latest checkpoint."""
    config = run_dir_lib.load_run_config(run_dir)
    spec = parse_host_id(config.env.id)
    if spec is None:
        raise ConfigError(f"{run_dir!r} trained on {config.env.id!r}, not a prefix-adder environment")
    # The run's episodes: its own time limit (env.max_episode_steps), else the env's 2 N, and
    # its options (a fanout-aware delay changes the features the policy sees and the costs).
    options = jax_form_options(host_options(config.env.id, config.env.params))
    env = PrefixAdderEnv(spec["bits"], area_weight=spec["area_weight"], horizon=config.env.max_episode_steps, **options)
    obs_spec, action_spec = env.observation_spec(None), env.action_spec(None)
    loaded = evaluate.load_policy(run_dir, config, obs_spec, action_spec, agent_seed, sample=False)
    weights = (np.linspace(0.0, 1.0, num_weights) if spec["area_weight"] is None
               else np.array([spec["area_weight"]]))
    graphs = greedy_graphs(env, loaded.policy, loaded.params, weights.astype(np.float32))
    pool, model = make_pool("synthesis" if spec["synthesis"] else "analytic", fanout_weight=env.fanout_weight)
    try:
        costs = pool.costs(list(graphs))
    finally:
        pool.close()
    designs = [Design(g, float(a), float(d)) for g, (a, d) in zip(graphs, costs)]
    write_designs(os.path.join(run_dir, DESIGNS_FILE), designs, model)
    return {"designs": len(designs), "weights": weights.tolist(), "env_steps": loaded.env_steps}
