#!/usr/bin/env bash
# Run a command in a copy of this tree with a patch applied: one device call can test main and a branch.
#   git diff main...BRANCH > .ab/BRANCH.patch     (here: the branch since its merge base; .ab is git-ignored: carry it)
#   tools/gpu_run.sh $OUT/main ...; tools/in_patched_tree.sh .ab/BRANCH.patch tools/mqa_gpu_run.sh $OUT/branch
# The copy is /tmp/patched_tree (the tree's ignored build outputs come along; the JIT cache is keyed by source, so
# both trees can share one). The scripts' install.sh replaces the installed package: run main's steps first, or
# install main again after. OUT folders given to the command should be absolute ($OUT is).
set -euo pipefail
PATCH=$(realpath "${1:?usage: tools/in_patched_tree.sh PATCH COMMAND...}")
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
rm -rf /tmp/patched_tree && cp -a "$ROOT" /tmp/patched_tree
cd /tmp/patched_tree
git apply "$PATCH" || { echo "in_patched_tree.sh: $PATCH does not apply to this tree" >&2; exit 2; }
exec "$@"
