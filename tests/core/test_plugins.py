"""Plugins: packages that register environments, algorithms and presets through the
`podracer.plugins` entry-point group (`podracer.plugins`), loaded once by every command and by
the Python API; a plugin that fails to load is a one-line error naming its entry point."""

import importlib.metadata
import os
import subprocess
import sys
import textwrap

import pytest

from podracer import plugins

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TOY_PLUGIN = '''
"""A toy podracer plugin: an environment id and a preset."""
import dataclasses

from experiments.presets import all_presets, register_preset
from podracer.envs import Catch, register_jax_env


def register():
    register_jax_env("ToyCatch-v0", Catch, overwrite=True)
    register_preset("ppo-toycatch-anakin", toy_preset, overwrite=True)


def toy_preset():
    """PPO on the toy plugin's ToyCatch-v0."""
    config = all_presets()["ppo-catch-anakin"]()
    return dataclasses.replace(config, env=dataclasses.replace(config.env, id="ToyCatch-v0"))
'''


def _entry_points(*points: importlib.metadata.EntryPoint):
    """`importlib.metadata.entry_points` as if only `points` were installed in the group."""
    real = importlib.metadata.entry_points

    def entry_points(**kwargs):
        if kwargs.get("group") == plugins.PLUGIN_GROUP:
            return importlib.metadata.EntryPoints(points)
        return real(**kwargs)

    return entry_points


def test_a_plugin_is_loaded_once_and_what_it_registers_is_seen(monkeypatch, tmp_path):
    (tmp_path / "toy_plugin_once.py").write_text(TOY_PLUGIN + "\nCALLS = []\n_register = register\n"
                                                 "def register():\n    CALLS.append(1)\n    _register()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    point = importlib.metadata.EntryPoint("toy", "toy_plugin_once:register", plugins.PLUGIN_GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points", _entry_points(point))
    monkeypatch.setattr(plugins, "_loaded", None)
    from experiments.presets import PRESETS, all_presets
    from podracer.envs import _USER, jax_env_ids

    monkeypatch.setattr("podracer.envs._USER", dict(_USER))
    monkeypatch.setitem(PRESETS, "placeholder", PRESETS["ppo-catch-anakin"])  # restored after the test
    try:
        assert "ToyCatch-v0" in jax_env_ids() and "ppo-toycatch-anakin" in all_presets()
        assert plugins.load_plugins() == ["toy"]
        assert sys.modules["toy_plugin_once"].CALLS == [1]  # loaded once, however many registries read
    finally:
        PRESETS.pop("ppo-toycatch-anakin", None)


def test_a_failing_plugin_is_one_line_naming_its_entry_point(monkeypatch, capsys):
    from experiments.cli import main

    point = importlib.metadata.EntryPoint("broken", "podracer_no_such_plugin_module:register", plugins.PLUGIN_GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points", _entry_points(point))
    monkeypatch.setattr(plugins, "_loaded", None)
    with pytest.raises(plugins.PluginError, match="plugin 'broken' .*podracer_no_such_plugin_module:register"):
        plugins.load_plugins()
    with pytest.raises(SystemExit) as exit_info:
        main(["list"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "plugin 'broken'" in err and "ModuleNotFoundError" in err


def _venv_with_plugin(tmp_path):
    """A virtual environment over this Python's packages with the toy plugin installed as a
    package (pyproject + one module, its entry point in `podracer.plugins`)."""
    package = tmp_path / "toy-plugin"
    package.mkdir()
    (package / "podracer_toy_plugin.py").write_text(TOY_PLUGIN)
    (package / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "podracer-toy-plugin"
        version = "0.1"

        [project.entry-points."podracer.plugins"]
        toy = "podracer_toy_plugin:register"

        [tool.setuptools]
        py-modules = ["podracer_toy_plugin"]
    """))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps",
                    str(package)], check=True, timeout=300, capture_output=True)
    return python


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_installed_plugin_package_adds_its_preset_and_environment(tmp_path):
    """`pip install` a plugin package: `podracer list` shows its preset and environment, and
    `podracer train` runs its preset."""
    python = _venv_with_plugin(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    listed = subprocess.run([python, "-m", "experiments.cli", "list"], env=env, capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "ppo-toycatch-anakin" in listed.stdout and "ToyCatch-v0" in listed.stdout
    run_dir = tmp_path / "run"
    trained = subprocess.run([python, "-m", "experiments.cli", "train", "ppo-toycatch-anakin", "--total-env-steps",
                              "1024", "--arch.updates-per-call", "1", "--log.console", "false", "--run-dir",
                              str(run_dir)], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    assert (run_dir / "metrics.jsonl").read_text().strip()
