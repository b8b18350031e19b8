#!/usr/bin/env bash
# Run a command against the installed deep_gemm with the kernel headers of an earlier commit: a same-run
# baseline for a kernel change (the host code, heuristics included, stays the installed one).
#   git archive COMMIT deep_gemm/include | gzip > .ab/include-COMMIT.tar.gz    (here; .ab is git-ignored: copy it to the GPU machine with the tree)
#   tools/with_old_headers.sh .ab/include-COMMIT.tar.gz python3 -m deep_gemm.bench --suite mqa ...
# The installed package is copied to /tmp/dg_old/deep_gemm with the tarball's include/ in place of its own (the
# JIT reads the headers next to the _C module), put first on PYTHONPATH, with its own JIT cache directory.
# The command runs in /tmp, so that the source tree's deep_gemm does not shadow the copy.
set -euo pipefail
TARBALL=$(realpath "${1:?usage: tools/with_old_headers.sh HEADERS_TARBALL COMMAND...}")
shift
PKG=$(cd /tmp && python3 -c "import deep_gemm, os; print(os.path.dirname(deep_gemm.__file__))")
rm -rf /tmp/dg_old && mkdir -p /tmp/dg_old
cp -r "$PKG" /tmp/dg_old/deep_gemm
rm -rf /tmp/dg_old/deep_gemm/include
tar -xzf "$TARBALL" -C /tmp/dg_old
[[ -d /tmp/dg_old/deep_gemm/include/deep_gemm ]] || { echo "with_old_headers.sh: no deep_gemm/include in $TARBALL" >&2; exit 2; }
cd /tmp
PYTHONPATH=/tmp/dg_old${PYTHONPATH:+:$PYTHONPATH} DG_JIT_CACHE_DIR=${DG_OLD_JIT_CACHE_DIR:-/tmp/dgc_old} exec "$@"
