#!/usr/bin/env bash
# Build deep_gemm._C in place for development: `import deep_gemm` from the repository root then uses
# the sources directly (kernel headers included). setuptools does not track header dependencies, so
# the extension is always rebuilt.
set -euo pipefail
cd "$(dirname "$0")"
CXX=${CXX:-g++} ${PYTHON:-python3} setup.py build_ext --inplace --force
