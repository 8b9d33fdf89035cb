"""One process of a multi-process Anakin run, for tests/test_distributed.py.

usage: python -m tests.distributed_worker PROCESS_ID NUM_PROCESSES PORT OUT.npz
"""

import sys

import jax


def small_config(distributed=None):
    """The run both the 2x2 processes and the 1x4 reference train."""
    from anakin import AnakinConfig
    from podracer.agents import PPOConfig
    from podracer.config import Config, DistributedConfig, EnvConfig

    return Config(
        env=EnvConfig("Catch"), agent=PPOConfig(num_minibatches=2, activation="relu"), seed=7,
        arch=AnakinConfig(num_envs=8, rollout_length=16, updates_per_call=4), total_env_steps=8 * 16 * 6,
        distributed=distributed or DistributedConfig(),
    )


def main() -> None:
    process_id, num_processes, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    jax.config.update("jax_num_cpu_devices", 2)
    import numpy as np

    import anakin
    from podracer import distributed
    from podracer.config import DistributedConfig

    dist = DistributedConfig(f"127.0.0.1:{port}", num_processes, process_id, heartbeat_timeout_s=10)
    distributed.initialize(dist)
    result = anakin.train(small_config(dist))
    if process_id == 0:
        leaves = [np.asarray(leaf.addressable_shards[0].data) for leaf in jax.tree.leaves(result.state.agent.params)]
        returns = [row["episode_return"] for row in result.metrics]
        np.savez(out, *leaves, returns=np.asarray(returns, dtype=np.float64))


if __name__ == "__main__":
    main()
