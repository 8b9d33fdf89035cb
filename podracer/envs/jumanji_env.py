"""Jumanji environments (`pip install 'podracer[jumanji]'`) as podracer `JaxEnv`s: `jumanji/<id>`.

An id is `jumanji/` and one of Jumanji's registered ids (`jumanji/Snake-v1`,
`jumanji/Game2048-v1`, ...: `jumanji.registered_environments()`), wrapped by
`podracer.envs.wrappers.TimeStepEnv`: a last step with discount 0 is a termination, one with
discount > 0 a truncation, and the time limit is the environment's `time_limit`.
Observations are Jumanji's NamedTuples; their `action_mask` becomes a `MaskedObs` mask.
Environments whose actions are neither discrete nor a bounded box (multi-discrete: BinPack,
Connector, ...) are refused when built. Jumanji's environments take their options as
constructor arguments, not parameters: `--env.params` does not apply. Checked with
jumanji 1.1.2 and jax 0.10.2.
"""

from __future__ import annotations

from podracer.envs.wrappers import TimeStepEnv

PREFIX = "jumanji/"
EXTRA = "jumanji"
# Jumanji is the optional extra `EXTRA`: imported where used, so this module imports without it.


def suite_ids() -> tuple[str, ...]:
    """`jumanji/<id>` for every id of Jumanji's registry; empty when it is not installed."""
    try:
        import jumanji
    except ImportError:
        return ()
    return tuple(PREFIX + name for name in sorted(jumanji.registered_environments()))


def make_suite_env(env_id: str) -> TimeStepEnv:
    """The adapter for `jumanji/<id>`; ImportError naming the extra when Jumanji is
    missing, KeyError for an id Jumanji does not know."""
    try:
        import jumanji
    except ImportError:
        raise ImportError(f"{env_id!r} needs Jumanji: pip install 'podracer[{EXTRA}]'") from None
    name = env_id[len(PREFIX):]
    if name not in jumanji.registered_environments():
        raise KeyError(name)
    return TimeStepEnv(jumanji.make(name), name=env_id)
