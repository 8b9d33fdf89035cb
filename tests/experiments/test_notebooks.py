"""Every notebook in experiments/notebooks runs top to bottom on a tiny budget."""

import glob
import os

import pytest

from tests.support.helpers import REPO, subprocess_env

NOTEBOOKS = sorted(glob.glob(os.path.join(REPO, "experiments", "notebooks", "*.ipynb")))


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs(path, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("PYTHONPATH", REPO)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("XLA_FLAGS", subprocess_env().get("XLA_FLAGS", ""))  # one device, conftest's fast compile
    monkeypatch.setenv("PODRACER_NOTEBOOK_STEPS", "4096")
    monkeypatch.setenv("PODRACER_NOTEBOOK_EPISODES", "10")
    monkeypatch.setenv("PODRACER_NOTEBOOK_RUNS", str(tmp_path / "runs"))
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.get("outputs", [])]
    assert not [out for out in outputs if out.output_type == "error"]
    images = [key for out in outputs for key in out.get("data", {}) if key.startswith("image/")]
    assert images, "the notebook shows a figure or a video"
