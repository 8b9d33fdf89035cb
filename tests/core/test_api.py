"""The Python-first API (`import podracer`) and the command line's per-field help."""

import dataclasses
import importlib
import importlib.util
import json
import os
import pathlib

import numpy as np
import pytest

import podracer
from experiments import presets as presets_module
from experiments.help import describe, field_docs, format_help
from experiments.presets import PRESETS, all_presets
from podracer.config import ConfigError
from tests.support.helpers import refuse_import, run_main


def test_presets_get_replaces_fields_and_validates():
    config = podracer.presets.get("ppo-cartpole-anakin", seed=3, agent=dict(learning_rate=1e-3),
                                  arch=dict(num_seeds=2))
    base = all_presets()["ppo-cartpole-anakin"]()
    assert config.seed == 3 and config.agent.learning_rate == 1e-3 and config.arch.num_seeds == 2
    assert dataclasses.replace(config, seed=0, agent=base.agent, arch=base.arch) == base
    assert "ppo-cartpole-anakin" in podracer.presets.names()


def test_presets_get_converts_values_as_the_command_line_parses_them():
    """Python values take the field's type, as the command line's strings do: an integral
    float for an int (`total_env_steps=1e6`), an int for a float, a list for a tuple."""
    config = podracer.presets.get("ppo-cartpole-anakin", total_env_steps=2e4, arch=dict(num_seeds=2.0, devices=[0]),
                                  agent=dict(learning_rate=1, hidden_sizes=[32, 32]))
    assert type(config.total_env_steps) is int and type(config.arch.num_seeds) is int
    assert config.arch.devices == (0,) and config.agent.hidden_sizes == (32, 32)
    assert type(config.agent.learning_rate) is float
    hash(config)  # still hashable: lists became tuples
    # NumPy numbers and paths, as notebooks hold them
    config = podracer.presets.get("ppo-cartpole-anakin", seed=np.int64(3), run_dir=pathlib.Path("runs") / "x",
                                  agent=dict(learning_rate=np.float32(0.5), hidden_sizes=np.array([8, 8])))
    assert (config.seed, config.run_dir, config.agent.hidden_sizes) == (3, "runs/x", (8, 8))
    assert type(config.seed) is int and type(config.agent.learning_rate) is float
    assert type(config.agent.hidden_sizes[0]) is int


@pytest.mark.parametrize("call, message", [
    (lambda: podracer.presets.get("ppo-cartpole-anakinn"), "unknown preset 'ppo-cartpole-anakinn'; did you mean"),
    (lambda: podracer.presets.get("ppo-cartpole-anakin", agent=dict(learning_rat=1)),
     "agent: unknown field 'learning_rat' in PPOConfig; did you mean learning_rate?"),
    (lambda: podracer.presets.get("ppo-cartpole-anakin", agent=dict(learning_rate=-1.0)),
     "agent.learning_rate must be > 0"),
    (lambda: podracer.presets.get("ppo-cartpole-anakin", sed=1), "unknown field 'sed' in Config; did you mean seed?"),
    (lambda: podracer.presets.get("ppo-cartpole-anakin", agent=dict(lr=1)),
     "agent: unknown field 'lr' in PPOConfig; did you mean learning_rate?"),
    (lambda: podracer.presets.get("ppo-cartpole-anakin", seed=1.5), "seed expects int, got 1.5"),
    (lambda: podracer.presets.get("ppo-cartpole-anakin", arch=dict(num_seeds="2")), "arch: num_seeds expects int"),
    (lambda: podracer.presets.get("ppo-cartpole-anakin", agent=dict(learning_rate="1e-3")),
     "agent: learning_rate expects float"),
    # a section given as a bare value used to replace the section: the run then failed with an
    # AttributeError ('str' object has no attribute 'id') at setup
    (lambda: podracer.presets.get("ppo-cartpole-anakin", env="Acrobot-v1"),
     "env expects a dict of its fields (env=dict(...)) or a config section such as EnvConfig(...)"),
    (lambda: podracer.presets.get("ppo-cartpole-anakin", log=False), "log expects a dict of its fields"),
])
def test_presets_get_names_the_bad_field(call, message):
    with pytest.raises(ConfigError, match=None) as error:
        call()
    assert message in str(error.value)


def test_config_refuses_a_section_of_the_wrong_kind():
    """`Config(env="CartPole-v1", ...)` or an algorithm's config class in place of an instance
    is a ConfigError naming the section when the config is built (they used to fail at setup
    with an AttributeError, or "no algorithm is registered for type")."""
    from anakin import AnakinConfig
    from podracer.agents import PPOConfig
    from podracer.config import Config

    with pytest.raises(ConfigError, match=r"^env must be an instance of EnvConfig .*'CartPole-v1'"):
        Config(agent=PPOConfig(), arch=AnakinConfig(), env="CartPole-v1")
    with pytest.raises(ConfigError, match=r"^checkpoint must be an instance of CheckpointConfig"):
        Config(agent=PPOConfig(), arch=AnakinConfig(), checkpoint=None)
    with pytest.raises(ConfigError, match=r"^agent must be a config instance .*not a class"):
        Config(agent=PPOConfig, arch=AnakinConfig())
    with pytest.raises(ConfigError, match=r"^arch must be a config instance .*not a class"):
        Config(agent=PPOConfig(), arch=AnakinConfig)


def test_every_float_field_refuses_infinity_naming_it():
    """A float field's own check catches NaN (every comparison with it fails) but not
    infinity: `--agent.learning-rate inf` used to be accepted, trained to NaN parameters,
    and `--agent.clip-eps inf` or `--agent.max-grad-norm inf` trained silently. Every real
    number of a `Config`, in every section (a user algorithm's too, and the items of a
    tuple field), must be finite; the error names the field."""
    import math
    import typing

    from anakin import AnakinConfig
    from podracer.agents import algorithms
    from podracer.config import Config, EnvConfig, from_dict, to_dict
    from sebulba import SebulbaConfig

    base = Config(agent=podracer.agents.PPOConfig(), arch=AnakinConfig())
    sections = [("agent", algorithm.config()) for algorithm in algorithms().values()]
    sections += [("arch", AnakinConfig()), ("arch", SebulbaConfig()), ("env", EnvConfig())]
    checked = []
    for name, section in sections:
        hints = typing.get_type_hints(type(section))
        for field in dataclasses.fields(section):
            if float not in (hints[field.name], *typing.get_args(hints[field.name])):
                continue
            for value in (math.inf, -math.inf):
                with pytest.raises(ConfigError) as error:
                    dataclasses.replace(base, **{name: dataclasses.replace(section, **{field.name: value})})
                assert str(error.value).startswith(f"{name}.{field.name} "), str(error.value)
            checked.append(f"{name}.{field.name}")
    assert {"agent.learning_rate", "agent.clip_eps", "agent.max_grad_norm", "env.repeat_action_probability"} \
        <= set(checked)

    @dataclasses.dataclass(frozen=True)
    class UserConfig:  # a user algorithm's config that checks nothing itself
        scale: float = 1.0
        coefs: tuple[float, ...] = (1.0, 2.0)

    with pytest.raises(ConfigError, match=r"^agent.scale must be finite, got inf$"):
        Config(agent=UserConfig(scale=math.inf), arch=AnakinConfig())
    with pytest.raises(ConfigError, match=r"^agent.coefs must be finite, got \(1.0, nan\)$"):
        Config(agent=UserConfig(coefs=(1.0, math.nan)), arch=AnakinConfig())
    with pytest.raises(ConfigError, match=r"^agent.learning_rate must be finite, got inf$"):
        podracer.presets.get("ppo-cartpole-anakin", agent=dict(learning_rate=np.float32("inf")))
    saved = json.loads(json.dumps(to_dict(base)).replace('"clip_eps": 0.2', '"clip_eps": Infinity'))
    with pytest.raises(ConfigError, match=r"^agent.clip_eps must be finite, got inf$"):  # an edited config.json
        from_dict(saved, (podracer.agents.PPOConfig, AnakinConfig))


def test_every_float_field_refuses_what_float32_rounds_to_zero_naming_it():
    """A positive step size or epsilon below float32's smallest normal number passes a
    field's `> 0` check in Python but is 0 (or a denormal, which accelerators flush to 0)
    in the program: `adam_eps=1.7e-69` divided by zero on the first update. Every float
    of every section is refused there, naming the field; 0 and normal values are kept."""
    import math
    import typing

    from anakin import AnakinConfig
    from podracer.agents import algorithms
    from podracer.config import Config

    base = Config(agent=podracer.agents.PPOConfig(), arch=AnakinConfig())
    for algorithm in algorithms().values():
        section = algorithm.config()
        hints = typing.get_type_hints(type(section))
        for field in dataclasses.fields(section):
            if float not in (hints[field.name], *typing.get_args(hints[field.name])):
                continue
            for value in (1.7e-69, -1e-40, 1e-45):  # refused by the float32 check or the field's own
                with pytest.raises(ConfigError, match=rf"^agent.{field.name} "):
                    dataclasses.replace(base, agent=dataclasses.replace(section, **{field.name: value}))
    with pytest.raises(ConfigError, match=r"^agent.adam_eps must be 0 or at least 1.175e-38 .*got 1.7e-69$"):
        Config(agent=podracer.agents.PPOConfig(adam_eps=1.7e-69), arch=AnakinConfig())
    kept = Config(agent=podracer.agents.PPOConfig(adam_eps=1.2e-38, entropy_coef=0.0), arch=AnakinConfig())
    assert kept.agent.adam_eps == 1.2e-38 and math.isfinite(kept.agent.adam_eps)


def test_presets_are_one_module_per_algorithm():
    """Each `experiments/presets_<algorithm>.py` (beside `presets_common.py`, and
    `presets_suites.py` for the optional environment suites) is named after
    a registered algorithm and holds `<ALGORITHM>_PRESETS`: that algorithm's presets, named
    `<algorithm>-...-<architecture>`; the built-in presets are exactly their union (the
    others are registered by plugins)."""
    from podracer.agents import algorithms

    here = os.path.dirname(presets_module.__file__)
    modules = sorted(name.removeprefix("presets_").removesuffix(".py") for name in os.listdir(here)
                     if name.startswith("presets_") and name.endswith(".py"))
    modules.remove("common")
    modules.remove("suites")  # the optional environment suites' presets, whatever their algorithm
    assert set(modules) <= set(algorithms()), modules
    union = {}
    for module in modules + ["suites"]:
        constant = "SUITE_PRESETS" if module == "suites" else f"{module.upper()}_PRESETS"
        presets = getattr(importlib.import_module(f"experiments.presets_{module}"), constant)
        for name, make in presets.items():
            config = make()
            arch = type(config.arch).__name__.removesuffix("Config").lower()
            algorithm = module if module != "suites" else name.split("-")[0]
            assert type(config.agent) is algorithms()[algorithm].config, name
            # `<algorithm>-...-<architecture>[-<variant>]` (ppo-pong-sebulba-fast)
            assert name.startswith(f"{algorithm}-") and (name.endswith(f"-{arch}") or f"-{arch}-" in name), name
        union.update(presets)
    assert union == {name: make for name, make in PRESETS.items() if name in presets_module._BUILTIN}


def test_top_level_api_is_explicit():
    """The top level is what `podracer/__init__.py` imports by name and lists in `__all__`:
    the command's Python API (ordinary functions, documented) and the library's modules;
    nothing else is resolved on access."""
    import inspect

    functions = {"evaluate", "plot", "resume", "train"}
    modules = {"agents", "config", "envs", "networks", "ops", "parallel", "replay", "runner", "types"}
    assert set(podracer.__all__) == functions | modules | {"presets"}
    assert not hasattr(podracer, "__getattr__")
    for name in functions:
        function = getattr(podracer, name)
        assert inspect.isfunction(function) and function.__module__ == "podracer.api", name
        assert "Args:" in function.__doc__ and "Returns:" in function.__doc__, name
    assert all(inspect.ismodule(getattr(podracer, name)) for name in modules)
    assert podracer.presets.names() == list(PRESETS)
    with pytest.raises(AttributeError):
        podracer.no_such_thing  # noqa: B018


def _python(code: str, cwd, timeout: float = 120):
    import subprocess
    import sys

    from tests.support.helpers import subprocess_env

    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=subprocess_env(), capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.costly
def test_import_podracer_is_light_and_reaches_the_library():
    """`import podracer` in a fresh process starts no JAX backend and imports nothing from the
    runners or `experiments/` (the layers keep their direction at import time), and the
    library's modules are attributes of the bare import (`podracer.agents.PPOConfig`)."""
    from tests.support.helpers import REPO

    code = ("import sys, podracer; from jax._src import xla_bridge; "
            "assert not xla_bridge._backends, 'a JAX backend started'; "
            "above = sorted(m for m in sys.modules if m.split('.')[0] in ('experiments', 'anakin', 'sebulba')); "
            "assert not above, above; "
            "podracer.agents.PPOConfig, podracer.config.ConfigError, podracer.envs.register_jax_env, podracer.ops; "
            "print('ok')")
    done = _python(code, REPO)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize("package", [pytest.param(True, marks=pytest.mark.slow), False], ids=["package", "namespace"])
@pytest.mark.costly
def test_api_uses_podracers_experiments_beside_a_folder_of_the_users(tmp_path, package):
    """From a directory with an `experiments/` folder of its own (first on sys.path for
    `python -c`), the API loads podracer's `experiments` package, the one beside `podracer/`;
    with the user's already imported, it fails with one line that says so."""
    from tests.support.helpers import REPO

    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "mine.py").write_text("")
    if package:
        (tmp_path / "experiments" / "__init__.py").write_text("")
    code = ("import sys, podracer; names = podracer.presets.names(); "
            "print(names[0], sys.modules['experiments'].__file__)")
    done = _python(code, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ppo-cartpole-anakin", os.path.join(REPO, "experiments", "__init__.py")]
    if not package:  # a namespace folder's modules are not found behind podracer's package
        return
    done = _python("import experiments.mine, podracer; podracer.presets.names()", tmp_path)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: podracer needs its own 'experiments' package") and "; rename yours" in last
    done = _python("import experiments.mine, runpy; runpy.run_module('podracer', run_name='__main__')", tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("podracer: error: podracer needs its own 'experiments' package"), done.stderr


def test_field_docs_read_trailing_and_leading_comments():
    @dataclasses.dataclass(frozen=True)
    class Example:
        # the first line of a leading comment
        # and its second line
        alpha: float = 1.0
        beta: int = 2  # a trailing comment
        gamma: str = "x"

    assert field_docs(Example) == {
        "alpha": "the first line of a leading comment and its second line", "beta": "a trailing comment",
    }


@pytest.mark.parametrize("name", sorted(all_presets()))
def test_every_preset_passes_setup(name):
    """Every preset's sizes, batch splits (replayed sequences included) and agent/action-space
    pairing are valid: its runner's setup passes (Anakin on the 4 test devices, Sebulba on
    one actor and one learner device, with the layout the config's thread fields give), so a
    preset never fails at the start of a run. A preset on an optional extra that is not
    installed fails with a one-line error naming it."""
    import anakin
    import sebulba

    extras = [extra for extra in ("brax", "navix", "jumanji", "craftax", "xminigrid")
              if importlib.util.find_spec(extra) is None]
    try:
        config = all_presets()[name]()
    except ConfigError as error:  # a suite's id is checked when the config is built
        if any(f"podracer[{extra}]" in str(error) for extra in extras):
            return
        raise
    if isinstance(config.arch, anakin.AnakinConfig):
        runner = anakin.runner
    else:
        runner = sebulba.runner
        # layout auto measures the host (tests/sebulba/test_autolayout.py); its checks are manual's
        config = dataclasses.replace(config, arch=dataclasses.replace(config.arch, actor_devices=(0,),
                                                                      learner_devices=(1,), layout="manual"))
    extra = next((extra for extra in extras if config.env.id.startswith(f"{extra}/")), None)
    if extra is not None:
        with pytest.raises(ConfigError, match=extra):
            runner.setup(config)
        return
    runner.setup(config)


def test_the_brax_presets_without_brax_fail_setup_with_one_line_naming_the_extra(monkeypatch):
    """With Brax missing (its import refused, whether or not it is installed), every Brax
    preset still builds its config, and Anakin's setup stops with a one-line ConfigError
    that says which extra to install."""
    import anakin

    brax_presets = sorted(name for name in PRESETS if "-brax-" in name)
    assert brax_presets == ["ppo-inverted-pendulum-brax-anakin", "sac-inverted-pendulum-brax-anakin",
                            "td3-halfcheetah-brax-anakin"]
    refuse_import(monkeypatch, "brax")
    for name in brax_presets:
        assert PRESETS[name]().env.id.startswith("brax/")
        with pytest.raises(ConfigError, match=r"pip install 'podracer\[brax\]'") as error:
            anakin.runner.setup(PRESETS[name]())
        assert "\n" not in str(error.value), name


@pytest.mark.parametrize("name", sorted(all_presets()))
def test_help_lists_every_field_of_every_preset(name):
    config = all_presets()[name]()
    text = format_help(name, config)
    for row in describe(config):
        assert f"--{row.path.replace('_', '-')} " in text, row.path


@pytest.mark.parametrize("name", sorted(all_presets()))
def test_help_describes_every_field_of_every_preset(name):
    """Every field `train NAME --help` lists has a description from its config class's
    comment, and one that says more than the field's own name."""
    undocumented = [row.path for row in describe(all_presets()[name]()) if not row.doc.strip()]
    assert undocumented == []
    for row in describe(all_presets()[name]()):
        words = row.doc.lower().strip(" .")
        assert words != row.path.split(".")[-1].replace("_", " "), f"{row.path}: {row.doc!r} repeats the name"


def test_train_help_on_the_command_line(capsys):
    code, out = run_main(capsys, "train", "ppo-catch-anakin", "--agent.gamma", "0.9", "--help")
    assert code == 0 and out.err == ""
    assert "--agent.learning-rate float  (default: 0.0005)" in out.out
    assert "--agent.gamma float  (default: 0.9)" in out.out  # overrides given with --help show
    assert "--arch.num-seeds int  (default: 1)" in out.out
    assert "independent agents trained by one program" in out.out  # the field's own comment
    code, out = run_main(capsys, "train", "--help")
    assert code == 0 and "usage: podracer train" in out.out
    code, out = run_main(capsys, "train", "nope", "--help")
    assert code == 2 and out.err.startswith("podracer: error: unknown preset 'nope'")


def test_list_groups_presets_with_whole_descriptions(capsys):
    code, out = run_main(capsys, "list")
    assert code == 0
    assert "  ppo / Anakin:\n    ppo-cartpole-anakin\n" in out.out
    assert "  dqn / Sebulba:\n" in out.out
    text = " ".join(out.out.split())
    for make in all_presets().values():
        assert " ".join(make.__doc__.split()) in text  # never cut mid-sentence


@pytest.mark.timeout(120)
def test_plot_returns_a_figure_without_pyplot(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"arch": {"num_seeds": 1}}))
    rows = [{"env_steps": 100 * i, "wall_s": 0.5 * i, "sps": 200.0, "episode_return": float(i)} for i in range(1, 6)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    import sys

    had_pyplot = "matplotlib.pyplot" in sys.modules
    figure = podracer.plot([str(run_dir)], labels=["probe"])
    from matplotlib.figure import Figure

    assert isinstance(figure, Figure) and len(figure.axes) == 2
    assert figure.axes[0].get_xlabel() == "Environment steps"
    assert ("matplotlib.pyplot" in sys.modules) == had_pyplot
    out = tmp_path / "curves.png"
    figure.savefig(out)
    assert os.path.getsize(out) > 1000


@pytest.mark.parametrize("call, argv, message", [
    (lambda run: podracer.evaluate(run, episodes=0), ["evaluate", "{run}", "--episodes", "0"],
     "episodes must be >= 1, got 0"),
    (lambda run: podracer.evaluate(run, max_steps=0), ["evaluate", "{run}", "--max-steps", "0"],
     "max_steps must be in [1, 2**31), got 0"),
    (lambda run: podracer.evaluate(run, seed=-1), ["evaluate", "{run}", "--seed", "-1"],
     "seed must be in [0, 2**32), got -1"),
    (lambda run: podracer.plot([run, run], labels=["one"]), ["plot", "{run}", "{run}", "--labels", "one", "--out",
                                                              "{run}/a.png"], "labels: got 1 labels for 2 runs"),
])
def test_python_api_errors_name_parameters_and_the_command_its_flags(tmp_path, capsys, call, argv, message):
    """An error of the Python API names the function's parameter (`episodes must be ...`);
    the command that runs the same function names its flag (`--episodes must be ...`)."""
    with pytest.raises(ConfigError) as raised:
        call(str(tmp_path))
    assert str(raised.value) == message
    code, out = run_main(capsys, *[arg.format(run=tmp_path) for arg in argv])
    flag = "--" + message.split()[0].rstrip(":").replace("_", "-")
    assert code == 2 and out.err.strip() == f"podracer: error: {flag}{message[len(flag) - 2:]}", out.err


def test_as_flags_writes_the_parameters_an_error_names_as_the_commands_flags():
    """The command line's translation: the parameter a message starts with and `NAME=True`
    become flags; other words, a parameter's name inside another word, and messages that start
    with no parameter stay as they are."""
    from experiments.cli_commands import EVALUATE_FLAGS
    from experiments.cli_parser import as_flags

    def shown(message: str) -> str:
        return str(as_flags(ConfigError(message), EVALUATE_FLAGS))

    assert shown("agent_seed must be in [0, 4) for this run (4 members), got 7") == \
        "--member/--agent-seed must be in [0, 4) for this run (4 members), got 7"
    assert shown("PPOConfig has no greedy policy; evaluate with sample=True") == \
        "PPOConfig has no greedy policy; evaluate with --sample"
    assert shown("step 3: holds no checkpoint of update 3") == "--step 3: holds no checkpoint of update 3"
    assert shown("video 'a.txt': write a .gif or an .mp4 file") == "--video 'a.txt': write a .gif or an .mp4 file"
    for unchanged in ("env.id: unknown", "seeds must be >= 1", "episodes_per_seed: 3", "the episodes ran"):
        assert shown(unchanged) == unchanged
