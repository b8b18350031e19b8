#!/usr/bin/env bash
# Install deep_gemm and what it needs into the current Python environment.
#   ./install.sh                      online (PyPI)
#   WHEELHOUSE=dir ./install.sh       offline, from wheels downloaded beforehand (see below)
# PyTorch must already be installed (any build: CPU-only is enough to build and to run the CPU tests);
# the package is built against it, without pip's build isolation (which would hide it).
# Also installed: NVRTC (nvidia-cuda-nvrtc, for DG_JIT_USE_NVRTC=1), and for the tests pytest and
# cuobjdump/nvdisasm (SASS checks); setuptools and wheel build the package. No kernel includes
# CUTLASS/CuTe: it is not installed.
# Offline: on a machine online with the same Python version and platform as the target, download
# every wheel this script installs (and their dependencies) into one folder:
#   python3 -m pip download -d wheelhouse "nvidia-cuda-nvrtc>=13.0,<14" "nvidia-cuda-cuobjdump>=13.0,<14" \
#       "nvidia-cuda-nvdisasm>=13.0,<14" "pytest>=7" "setuptools>=64" wheel
# then, on the target: WHEELHOUSE=wheelhouse ./install.sh
set -euo pipefail
cd "$(dirname "$0")"

PY=${PYTHON:-python3}
PIP=("$PY" -m pip install --disable-pip-version-check)
if [[ -n "${WHEELHOUSE:-}" ]]; then
    PIP+=(--no-index --find-links "$WHEELHOUSE")
fi

if ! "$PY" -c "import torch" 2>/dev/null; then
    echo "install.sh: PyTorch is not installed in $($PY -c 'import sys; print(sys.executable)')." >&2
    echo "            Install it first (e.g. 'pip install torch'), then run ./install.sh again." >&2
    exit 1
fi

# NVRTC and test tools: only those matching the installed CUDA 13 toolchain.
"${PIP[@]}" --no-deps "nvidia-cuda-nvrtc>=13.0,<14" "nvidia-cuda-cuobjdump>=13.0,<14" "nvidia-cuda-nvdisasm>=13.0,<14"
"${PIP[@]}" "pytest>=7" "setuptools>=64" "wheel"

# The package itself: builds deep_gemm._C against the installed PyTorch (no CUDA compiled here).
# setuptools does not track header dependencies: start from a clean build folder.
rm -rf build
CXX=${CXX:-g++} "${PIP[@]}" --no-build-isolation --no-deps .
(cd / && "$PY" -c "import deep_gemm; print('deep_gemm', deep_gemm.__version__, 'installed at', deep_gemm.__path__[0])")
