"""A clear error when `deep_gemm._C` (the C++ extension) is missing from the imported package.

The usual cause: Python runs from the repository root, so the source folder `deep_gemm/` shadows the
installed package, and the sources hold no built extension until `./develop.sh` builds it in place.
"""

import importlib.util
from pathlib import Path


def require_built_extension() -> None:
    """Raise ImportError saying what to do when `deep_gemm._C` cannot be found next to this package.

    A found but unloadable extension (e.g. built against another PyTorch) is left to its own import error.
    """
    if importlib.util.find_spec("deep_gemm._C") is not None:
        return
    package_dir = Path(__file__).resolve().parent
    is_source_tree = (package_dir.parent / "setup.py").exists() and (package_dir.parent / "csrc").is_dir()
    if is_source_tree:
        raise ImportError(
            f"deep_gemm: the C++ extension deep_gemm._C is not built in the source tree {package_dir} (Python "
            "imports these sources instead of an installed deep_gemm when it runs from the repository root). "
            "Either build the extension in place with ./develop.sh (then the sources are used directly), "
            "or run Python from another directory to use the installed package."
        )
    raise ImportError(
        f"deep_gemm: the C++ extension deep_gemm._C is missing from {package_dir}: the installation is "
        "incomplete; reinstall with ./install.sh (or `pip install --no-build-isolation .` from the sources)."
    )
