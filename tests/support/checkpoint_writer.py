"""A process that writes checkpoints and dies while writing one (run by test_checkpoint).

`python -m tests.support.checkpoint_writer DIR finalize`: saves step 1, then is SIGKILLed inside
the save of step 2, after its data is written, just before orbax's atomic rename.
`python -m tests.support.checkpoint_writer DIR loop`: saves steps 1, 2, ... of a 16 MB state
whose every value equals its step, printing each step when saved, until killed.
"""

import os
import signal
import sys

import jax.numpy as jnp

from podracer.checkpoint import Checkpointer, Progress


def state_for(step: int, size: int) -> dict:
    return {"params": jnp.full((size,), float(step)), "key": __import__("jax").random.key(step)}


def main(directory: str, mode: str) -> None:
    size = 4 * 2**20 if mode == "loop" else 16
    checkpoints = Checkpointer(directory, keep=3)
    if mode == "finalize":
        checkpoints.save(state_for(1, size), Progress(updates=1))
        from orbax.checkpoint._src.path import atomicity

        async def die(self):
            os.kill(os.getpid(), signal.SIGKILL)

        atomicity.AtomicRenameTemporaryPath.finalize = die
        checkpoints.save(state_for(2, size), Progress(updates=2))
        return
    step = 1
    while True:
        checkpoints.save(state_for(step, size), Progress(updates=step))
        print(step, flush=True)
        step += 1


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
