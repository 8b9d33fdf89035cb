"""`python -m tests.support.multiprocess_cli [--die-in-checkpoint N] ARGS...`: `podracer ARGS`, for
tests/integration/test_multiprocess.py.

With `--die-in-checkpoint N` the process SIGKILLs itself inside its N-th checkpoint save,
after writing its part of the checkpoint and before orbax commits it: at orbax's
`Checkpointer:save` barrier, where the other processes then wait for it.
"""

import os
import signal
import sys


def die_in_checkpoint(n: int) -> None:
    from orbax.checkpoint._src.multihost import multihost

    real_sync = multihost.sync_global_processes
    saves = []

    def sync(name: str, *args, **kwargs):
        if name.split(".")[0] == "Checkpointer:save":
            saves.append(name)
            if len(saves) == n:
                print(f"test: process killed inside checkpoint save {n}", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        return real_sync(name, *args, **kwargs)

    multihost.sync_global_processes = sync


def main(argv: list[str]) -> None:
    if argv[:1] == ["--die-in-checkpoint"]:
        die_in_checkpoint(int(argv[1]))
        argv = argv[2:]
    from experiments.cli import main as podracer

    podracer(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
