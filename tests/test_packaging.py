"""CPU tier: what a new user meets before the first GEMM. `import deep_gemm` from a source tree without a built
extension says what to do; building in pip's build isolation (torch not importable) says what to do."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_from_an_unbuilt_source_tree_says_what_to_do(tmp_path: Path) -> None:
    # A copy of the repository's layout (setup.py, csrc/, the Python package without _C), Python run from its root
    (tmp_path / "csrc").mkdir()
    shutil.copy(ROOT / "setup.py", tmp_path / "setup.py")
    shutil.copytree(ROOT / "deep_gemm", tmp_path / "deep_gemm", ignore=shutil.ignore_patterns("_C*.so", "include"))
    result = subprocess.run([sys.executable, "-c", "import deep_gemm"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: deep_gemm: the C++ extension deep_gemm._C is not built"), result.stderr
    assert "./develop.sh" in last and "run Python from another directory" in last, last


def test_import_of_an_incomplete_install_says_to_reinstall(tmp_path: Path) -> None:
    # The package alone (no setup.py or csrc/ beside it): an installation without its extension
    shutil.copytree(ROOT / "deep_gemm", tmp_path / "deep_gemm", ignore=shutil.ignore_patterns("_C*.so", "include"))
    result = subprocess.run([sys.executable, "-c", "import deep_gemm"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode != 0
    assert "the installation is incomplete; reinstall with ./install.sh" in result.stderr, result.stderr


def test_build_without_torch_says_no_build_isolation() -> None:
    # pip's build isolation hides the installed PyTorch: setup.py cannot import torch
    code = (
        "import runpy, sys; sys.modules['torch'] = None; sys.argv = ['setup.py', '--version']; "
        "runpy.run_path('setup.py')"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode != 0
    assert "pip install --no-build-isolation ." in result.stderr and "./install.sh" in result.stderr, result.stderr
