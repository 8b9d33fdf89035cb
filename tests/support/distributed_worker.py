"""One process of a multi-process run, for tests/integration/test_distributed.py.

usage: python -m tests.support.distributed_worker PROCESS_ID NUM_PROCESSES PORT OUT [anakin|sebulba]

anakin:  train `small_config` and (process 0) save the parameters and returns to OUT.npz.
sebulba: train `sebulba_config` in run directory OUT until process 1 asks to stop after
         its third update; every process saves its parameters and counters to
         OUT/process-<id>.npz.
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


def sebulba_config(run_dir, distributed):
    """Per process 1 actor and 1 learner device; 4 envs in all (2 per process)."""
    from podracer.agents import PPOConfig
    from podracer.config import CheckpointConfig, Config, EnvConfig, LogConfig
    from sebulba import SebulbaConfig

    return Config(
        env=EnvConfig("CartPole-v1"), agent=PPOConfig(num_minibatches=2, num_epochs=1, hidden_sizes=(16,)),
        arch=SebulbaConfig(num_envs=4, rollout_length=16, actor_devices=(0,), learner_devices=(1,),
                           max_policy_lag=1, updates_per_log=1),
        total_env_steps=4 * 16 * 1000, seed=3, run_dir=run_dir, distributed=distributed,
        log=LogConfig(console=False, tensorboard=False), checkpoint=CheckpointConfig(every_updates=2),
    )


def run_sebulba(process_id, dist, out) -> None:
    import os

    import numpy as np

    from experiments import train as train_lib

    polls = []

    def should_stop():  # only process 1 asks; every process must stop with it
        polls.append(1)
        return process_id == 1 and len(polls) >= 3

    result = train_lib.train(sebulba_config(out, dist), should_stop=should_stop)
    leaves = [np.asarray(leaf.addressable_data(0)) for leaf in jax.tree.leaves(result.state.params)]
    steps = [row["env_steps"] for row in result.metrics]
    np.savez(os.path.join(out, f"process-{process_id}.npz"), *leaves, stopped=result.stopped,
             update_count=int(np.asarray(result.state.update_count.addressable_data(0))), env_steps=steps)


def main() -> None:
    process_id, num_processes, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    arch = sys.argv[5] if len(sys.argv) > 5 else "anakin"
    jax.config.update("jax_num_cpu_devices", 2)
    import numpy as np

    import anakin
    from podracer import distributed
    from podracer.config import DistributedConfig

    dist = DistributedConfig(f"127.0.0.1:{port}", num_processes, process_id, heartbeat_timeout_s=10)
    distributed.initialize(dist)
    if arch == "sebulba":
        run_sebulba(process_id, dist, out)
        return
    result = anakin.train(small_config(dist))
    if process_id == 0:
        leaves = [np.asarray(leaf.addressable_shards[0].data) for leaf in jax.tree.leaves(result.state.agent.params)]
        returns = [row["episode_return"] for row in result.metrics]
        np.savez(out, *leaves, returns=np.asarray(returns, dtype=np.float64))


if __name__ == "__main__":
    main()
