"""podracer as a user installs it: the wheel (built from the sdist, as `python -m build` does)
installed into a fresh virtual environment, run from a research repository's directory that
has an `experiments/` folder of its own, which shadows podracer's top-level `experiments`
package on `sys.path` for `python -m` and `python -c`."""

import glob
import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.helpers import REPO, subprocess_env

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel"), pytest.mark.timeout(240)]


def _run(args: list[str], cwd, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """`(python, podracer command, environment)` of a virtual environment that holds the
    wheel (no editable install, no checkout on PYTHONPATH); its dependencies come from this
    interpreter's site-packages (`--system-site-packages`), so nothing is downloaded."""
    pytest.importorskip("build", reason="building the wheel needs the `build` package (the test extra)")
    root = tmp_path_factory.mktemp("wheel")
    env = subprocess_env()
    env.pop("PYTHONPATH")
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(root / "dist"), REPO], root, env, 300)
    wheel, = glob.glob(str(root / "dist" / "*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {"podracer/py.typed", "podracer/api.py", "experiments/notebooks/quickstart.ipynb"} <= set(names)
    assert not [name for name in names if name.startswith("tests/")]
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(root / "venv")], root, env)
    python, command = str(root / "venv" / "bin" / "python"), str(root / "venv" / "bin" / "podracer")
    # A venv's --system-site-packages are its base interpreter's: when this one runs in a venv
    # of its own, its site-packages (the dependencies) come after the new venv's through a .pth.
    site_dir = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root, env)
    (Path(site_dir.stdout.strip()) / "podracer-test-dependencies.pth").write_text("\n".join(site.getsitepackages()))
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", wheel], root, env)
    return python, command, env


@pytest.mark.parametrize("package", [True, False], ids=["package", "namespace"])
def test_the_wheel_runs_beside_a_users_experiments_folder(installed, tmp_path, package):
    python, command, env = installed
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "analysis.py").write_text("")
    if package:
        (tmp_path / "experiments" / "__init__.py").write_text("")
    version = _run([python, "-m", "podracer", "--version"], tmp_path, env).stdout.strip()
    assert version.startswith("podracer ")
    listed = _run([command, "list"], tmp_path, env).stdout
    assert "ppo-catch-anakin" in listed
    where = _run([python, "-c", "import sys, podracer; podracer.presets.names(); "
                  "print(podracer.__file__, sys.modules['experiments'].__file__)"], tmp_path, env).stdout.split()
    site = os.path.dirname(os.path.dirname(where[0]))  # the installed packages: not the checkout, not the user's
    assert site.startswith(os.path.dirname(os.path.dirname(python)) + os.sep), where
    assert where[1] == os.path.join(site, "experiments", "__init__.py"), where
    if not package:
        return
    # the user's package, imported first, is named in one line (`python -c` ends with the traceback)
    clash = subprocess.run([python, "-c", "import experiments, podracer; podracer.presets.names()"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=120)
    assert clash.returncode == 1 and "another module named 'experiments' is already imported" in clash.stderr
    _run([command, "train", "ppo-catch-anakin", "--total-env-steps", "2e4", "--run-dir", "cli-run",
          "--log.console", "false"], tmp_path, env)
    assert os.path.isfile(tmp_path / "cli-run" / "metrics.jsonl")
    code = ("import json, podracer; "
            "result = podracer.train(podracer.presets.get('ppo-catch-anakin', total_env_steps=2e4, run_dir='api-run'), "
            "console=False); print(json.dumps(result.metrics[-1]['env_steps']))")
    assert json.loads(_run([python, "-c", code], tmp_path, env).stdout.splitlines()[-1]) > 1e4  # whole updates
