"""Environments: the JAX protocol (Anakin) and its registry."""

from __future__ import annotations

import difflib
import importlib
from typing import Any, Callable, NoReturn

import jax
import numpy as np

from podracer.config import ConfigError, EnvConfig
from podracer.envs.base import EnvState, JaxEnv, TimeLimitJaxEnv, example_action
from podracer.envs.brax_env import BRAX_IDS, make_brax_env
from podracer.envs.catch import Catch
from podracer.envs.families import (
    JaxEnvFamily,
    jax_env_families,
    jax_family_of,
    register_host_env_family,
    register_jax_env_family,
)
from podracer.envs.gymnax_env import GYMNAX_IDS, GymnaxEnv, make_gymnax_env
from podracer.envs.observe import ObservedJaxEnv
from podracer.envs.params import check_finite_start, with_params
from podracer.envs.probes import PROBES
from podracer.envs.structured import MASK_FIELDS, masked_from_field
from podracer.envs.wrappers import GymnaxAPIEnv, TimeStepEnv, action_spec_of, observation_spec_of
from podracer.plugins import load_plugins
from podracer.types import obs_spec_map

__all__ = [
    "EnvState", "JaxEnv", "Catch", "GymnaxEnv", "make_jax_env", "make_configured_jax_env", "jax_env_ids",
    "register_jax_env", "register_jax_env_family", "register_host_env_family", "UnknownEnvError", "GymnaxAPIEnv",
    "TimeStepEnv", "action_spec_of", "observation_spec_of", "masked_from_field", "MASK_FIELDS", "SUITE_MODULES",
]

# Optional suites by id prefix (beside Brax's `brax/`): prefix -> the module of its adapter,
# which has `EXTRA` (the extra to install), `suite_ids()` and `make_suite_env(env_id)`.
SUITE_MODULES = {
    "navix/": "podracer.envs.navix_env",
    "jumanji/": "podracer.envs.jumanji_env",
    "craftax/": "podracer.envs.craftax_env",
    "xminigrid/": "podracer.envs.xminigrid_env",
}


def _suite_module(env_id: str) -> Any:
    """The adapter module of the suite whose prefix `env_id` has, or None."""
    prefix = next((prefix for prefix in SUITE_MODULES if env_id.startswith(prefix)), None)
    return None if prefix is None else importlib.import_module(SUITE_MODULES[prefix])


def suite_ids() -> list[str]:
    """The ids of every installed optional suite (`SUITE_MODULES`)."""
    return [env_id for module in SUITE_MODULES.values() for env_id in importlib.import_module(module).suite_ids()]


class UnknownEnvError(ValueError):
    """An environment id that no registry knows; the message lists close matches."""


_BUILTIN: dict[str, Callable[[], JaxEnv]] = {"Catch": Catch, **PROBES}
_USER: dict[str, Callable[[], JaxEnv]] = {}  # filled by register_jax_env, never at import


def jax_env_ids() -> list[str]:
    """Known ids: built-ins, the examples of the registered id families
    (`podracer.envs.families`: a family also builds the ids of its pattern that it does not
    list), gymnax ids, Brax ids (`brax/<name>`, with the `brax` extra), the installed suites'
    ids (`navix/<id>`, `jumanji/<id>`, `craftax/<id>`, `xminigrid/<id>`, each with its extra)
    and user ids."""
    load_plugins()
    examples = [env_id for family in jax_env_families() for env_id in family.examples]
    return sorted(_BUILTIN) + examples + list(GYMNAX_IDS) + list(BRAX_IDS) + suite_ids() + sorted(_USER)


def register_jax_env(env_id: str, factory: Callable[[], JaxEnv], overwrite: bool = False) -> None:
    """Make `make_jax_env(env_id)` (and so `EnvConfig(env_id)`) build `factory()`.

    For user environments in this process (a notebook, a script); a built-in id cannot be
    replaced, and a user id only with `overwrite=True`.
    """
    if (env_id in _BUILTIN or env_id in GYMNAX_IDS or env_id in BRAX_IDS or jax_family_of(env_id) is not None
            or _suite_module(env_id) is not None):
        raise ValueError(f"{env_id!r} is a built-in environment id; choose another name")
    if env_id in _USER and not overwrite:
        raise ValueError(f"{env_id!r} is already registered; pass overwrite=True to replace it")
    _USER[env_id] = factory


def unknown_env_error(env_id: str, known: list[str], kind: str) -> UnknownEnvError:
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(known)}"
    register = (" (a user JAX environment must be registered with register_jax_env in this process first: for "
                "the podracer command, name the module that registers it in $PODRACER_IMPORT)") \
        if kind.lower() in ("jax", "host") and not close else ""
    return UnknownEnvError(f"unknown {kind} environment {env_id!r}{register}{hint}")


def make_jax_env(env_id: str) -> JaxEnv:
    """Build a JAX environment by id: built-ins (`Catch`), user ids (`register_jax_env`),
    gymnax ids (`CartPole-v1`), the ids of registered families (`register_jax_env_family`),
    Brax ids (`brax/ant`) or a suite's (`navix/Navix-Empty-5x5-v0`, `SUITE_MODULES`;
    UnknownEnvError naming the extra when Brax or the suite is not installed)."""
    load_plugins()
    if env_id in _BUILTIN:
        return _BUILTIN[env_id]()
    if env_id in _USER:
        return _USER[env_id]()
    if env_id in GYMNAX_IDS:
        return make_gymnax_env(env_id)
    family = jax_family_of(env_id)
    if family is not None:
        env = _make_in_family(family, env_id, ())
        if env is not None:
            return env
    if env_id in BRAX_IDS:
        try:
            return make_brax_env(env_id)
        except ImportError as error:
            raise UnknownEnvError(str(error)) from None
    suite = _suite_module(env_id)
    if suite is not None:
        try:
            return suite.make_suite_env(env_id)
        except ImportError as error:
            raise UnknownEnvError(str(error)) from None
        except KeyError:
            raise unknown_env_error(env_id, list(suite.suite_ids()), "JAX") from None
    raise unknown_env_error(env_id, jax_env_ids(), "JAX")


def check_time_limit(env: JaxEnv, env_config: EnvConfig) -> None:
    """ConfigError naming `env.max_episode_steps` unless the episodes of `env` have a time
    limit: its own `max_episode_steps`, or the config's. Truncation and `evaluate`'s loop
    rely on one, so an environment without it is refused at setup, not while compiling."""
    if env_config.max_episode_steps is None and type(env).max_episode_steps is JaxEnv.max_episode_steps:
        raise ConfigError(f"env.max_episode_steps: env.id {env_config.id!r} ({type(env).__name__}) does not "
                          "implement JaxEnv.max_episode_steps; implement it or set env.max_episode_steps")


def _describe(tree: Any) -> str:
    """`float32[7]` for an array's shape and dtype, a pytree of them otherwise."""
    leaves, treedef = jax.tree.flatten(tree)
    shown = [f"{leaf.dtype}{list(leaf.shape)}" for leaf in leaves]
    return shown[0] if treedef == jax.tree.structure(0) else str(jax.tree.unflatten(treedef, shown))


def _first_line(error: BaseException) -> str:
    """`TypeName: first line of the message`: one line for a ConfigError."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _same_abstract(a: Any, b: Any) -> bool:
    """Whether two pytrees have the same structure and the same leaf shapes and dtypes.
    Compared leaf by leaf, never with the containers' own `==`: an environment library's
    state classes may define `__eq__` elementwise (navix's `Event`) or not at all."""
    a_leaves, a_def = jax.tree.flatten(a)
    b_leaves, b_def = jax.tree.flatten(b)
    try:
        same_structure = bool(a_def == b_def)
    except Exception:  # noqa: BLE001 - a node's static data whose `==` is not a boolean
        same_structure = str(a_def) == str(b_def)
    # `x.dtype` as is: a PRNG key in an environment's state has a dtype numpy cannot read
    return same_structure and all(
        tuple(x.shape) == tuple(y.shape) and x.dtype == y.dtype for x, y in zip(a_leaves, b_leaves))


def check_env_outputs(env: JaxEnv, env_id: str) -> None:
    """ConfigError naming `env.id` unless `reset_env` and `step_env` return what `env`
    declares: observations shaped and typed as its `observation_spec`, a scalar reward and
    termination, and the same inner state from both. Traced with `jax.eval_shape` (nothing
    runs), for user environments, whose mismatches would otherwise surface as a shape error
    inside the network or the rollout's scan, or not at all (a uint8 spec truncating float
    observations in a replay buffer)."""
    params = env.default_params
    name = type(env).__name__
    spec = obs_spec_map(lambda leaf: jax.ShapeDtypeStruct(tuple(leaf.shape), np.dtype(leaf.dtype)),
                        env.observation_spec(params))
    action = example_action(env.action_spec(params))
    key = jax.eval_shape(lambda: jax.random.key(0))

    def fail(what: str) -> NoReturn:
        raise ConfigError(f"env.id {env_id!r}: {name}.{what}")

    try:
        inner, obs = jax.eval_shape(env.reset_env, key, params)
        step = jax.eval_shape(env.step_env, key, inner, action, params)
    except Exception as error:  # noqa: BLE001 - shown whole, with the environment it came from
        fail(f"reset_env or step_env failed when traced: {_first_line(error)}")
    for where, observed in (("reset_env", obs), ("step_env", step[1])):
        if not _same_abstract(observed, spec):
            fail(f"{where} returns observations {_describe(observed)}, but observation_spec declares "
                 f"{_describe(spec)}")
    for index, what in ((2, "reward"), (3, "terminated")):
        if tuple(step[index].shape) != ():
            fail(f"step_env returns a {what} of shape {tuple(step[index].shape)}; it must be a scalar "
                 "(one environment: the runners vmap it)")
    if not _same_abstract(step[0], inner):
        fail(f"step_env returns a state {_describe(step[0])} unlike reset_env's {_describe(inner)} (auto-reset "
             "selects between them: same structure, shapes and dtypes)")


def check_batched_step(env: JaxEnv, env_id: str) -> None:
    """ConfigError naming `env.id` unless `env` traces as the runners call it: `vmap` of
    `reset` and of `step` (auto-reset included) over a batch. Traced with `jax.eval_shape`
    (nothing runs), so that an environment that cannot be batched fails at setup, in one
    line, rather than inside the compile of the whole program."""
    params = env.default_params
    action = example_action(env.action_spec(params))
    try:
        keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), 2))
        actions = jax.ShapeDtypeStruct((2, *action.shape), action.dtype)
        state, _ = jax.eval_shape(jax.vmap(env.reset, in_axes=(0, None)), keys, params)
        jax.eval_shape(jax.vmap(env.step, in_axes=(0, 0, 0, None)), keys, state, actions, params)
    except Exception as error:  # noqa: BLE001 - shown in one line, with the environment it came from
        raise ConfigError(f"env.id {env_id!r}: {type(env).__name__}: a batched step (vmap of reset and step) "
                          f"failed when traced: {_first_line(error)}") from None


def _make_in_family(family: JaxEnvFamily, env_id: str, params: tuple[str, ...]) -> JaxEnv | None:
    """`family.make(env_id, params)`; its ValueError becomes UnknownEnvError (no params) or
    a ConfigError naming `env.params`."""
    try:
        return family.make(env_id, params)
    except ConfigError:
        raise
    except ValueError as error:
        if params:
            raise ConfigError(f"env.params: {error}") from None
        raise UnknownEnvError(str(error)) from None


def _with_params(env: JaxEnv, env_config: EnvConfig) -> JaxEnv:
    """`env` with `env_config.params` set: an id family's environment built again by its
    factory with those options, another environment's parameters replaced by name."""
    family = None if env_config.id in _USER else jax_family_of(env_config.id)
    if family is None:
        return with_params(env, env_config.params, env_config.id)
    return _make_in_family(family, env_config.id, env_config.params)


def make_configured_jax_env(env_config: EnvConfig) -> JaxEnv:
    """The JAX environment an `EnvConfig` describes: `make_jax_env(env_config.id)` (a user
    environment's outputs checked against its specs, `check_env_outputs`), showing
    the agent only `env_config.observe` where that is set (`podracer.envs.observe`), a
    legal-action mask field of dict/NamedTuple observations as a `MaskedObs`
    (`masked_from_field`), with `env_config.params` set (`podracer.envs.params`; an id
    family's factory reads them as its options, `podracer.envs.families`) and truncated after
    `env_config.max_episode_steps` where that is set (`TimeLimitJaxEnv`)."""
    env = make_jax_env(env_config.id)
    check_time_limit(env, env_config)
    if env_config.params:
        env = _with_params(env, env_config)
    checked = env_config.id in _USER or _suite_module(env_config.id) is not None
    if checked:  # built-ins are checked by the tests; a user's and a suite's here
        check_env_outputs(env, env_config.id)  # with the run's parameters (shapes may follow them)
    env = masked_from_field(env)  # a dict/NamedTuple observation's `action_mask` field -> MaskedObs
    if env_config.params and hasattr(env, "replace_params"):  # parameters set by name, unvalidated by gymnax
        check_finite_start(env, env_config.params, env_config.id)
    if env_config.max_episode_steps is not None:
        env = TimeLimitJaxEnv(env, env_config.max_episode_steps)
    if env_config.observe:
        env = ObservedJaxEnv(env, env_config.observe, env_config.id)
    if checked:
        check_batched_step(env, env_config.id)
    return env
