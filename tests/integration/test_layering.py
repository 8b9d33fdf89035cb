"""The layering of the packages, as import-linter's contracts in setup.cfg (`[importlinter]`)
state it: the core (`podracer`) imports no runner and no application (`podracer/__main__.py`,
the command line, excepted); anakin and sebulba never import each other; an algorithm
(`podracer.agents`) imports no environment and no runner; only the prefix-adder application
imports `experiments.prefix`. `lint-imports` from the repository root checks the same. And no
module of the library (core and runners) is named `common`, `utils` or `helpers`."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_import_contracts_are_kept():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    script = ("import sys; from importlinter.cli import lint_imports; "
              "sys.exit(lint_imports(config_filename='setup.cfg', no_cache=True, no_logo=True))")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout, result.stdout


def test_the_library_has_no_module_named_common_utils_or_helpers():
    """Every module of the core and the runners is named for what it holds: none is a
    `common`, `utils` or `helpers` grab bag."""
    vague = {"common", "utils", "helpers"}
    found = []
    for package in ("podracer", "anakin", "sebulba"):
        for folder, dirs, files in os.walk(os.path.join(REPO, package)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            names = {os.path.splitext(f)[0] for f in files if f.endswith(".py")} | set(dirs)
            found += [os.path.relpath(os.path.join(folder, name), REPO) for name in sorted(names & vague)]
    assert not found, f"modules named for no role: {found}"
