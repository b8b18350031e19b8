#!/usr/bin/env bash
# One device call for a kernel change: the dense bench with its baselines and a same-run A/B against the kernel
# headers of an earlier commit (tools/gpu_run.sh without tests), then the GPU tests (tools/gpu_run.sh without
# bench); the main files of both into OUT (the device tool returns at most 8 files).
#   git archive COMMIT deep_gemm/include | gzip > .ab/include-COMMIT.tar.gz          (here; .ab carried)
#   tools/gpu_ab_then_tests.sh OUT .ab/include-COMMIT.tar.gz [OLD_KERNELS_TARBALL]
# OLD_KERNELS_TARBALL: cache entries built with the old headers (tools/prebuild_jit_cache.py run against a checkout
# of COMMIT), unpacked into the old headers' cache so that the A/B loads them instead of compiling.
# Env: DG_BENCH_ARGS (both benches), DG_GPU_RUN_TEST_PATHS, DG_GPU_RUN_TEST_WORKERS (default 4), DG_AB_TESTS_TIMEOUT
# (seconds for the test part, default 240).
set -uo pipefail
OUT=$(realpath -m "${1:?usage: tools/gpu_ab_then_tests.sh OUT OLD_HEADERS_TARBALL [OLD_KERNELS_TARBALL]}")
OLD_HEADERS=${2:?old headers tarball}
OLD_KERNELS=${3:-}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
export DG_OLD_JIT_CACHE_DIR=/tmp/dgc_old
if [[ -n $OLD_KERNELS ]]; then
    mkdir -p "$DG_OLD_JIT_CACHE_DIR/kernels" && tar xzf "$OLD_KERNELS" -C "$DG_OLD_JIT_CACHE_DIR/kernels"
fi
collect() {  # (after each part, so that a call stopped at its limit still returns the first part's files)
    for f in "$@"; do [[ -f $f ]] && cp "$f" "$OUT/"; done
}
DG_GPU_RUN_SKIP_TESTS=1 DG_GPU_RUN_SKIP_JIT=1 DG_GPU_RUN_OLD_INCLUDE="$OLD_HEADERS" tools/gpu_run.sh /tmp/ab_bench
cp /tmp/ab_bench/all-logs.tgz "$OUT/bench-all-logs.tgz"
collect /tmp/ab_bench/bench.log /tmp/ab_bench/bench.json /tmp/ab_bench/ab.log
DG_GPU_RUN_SKIP_BENCH=1 DG_GPU_RUN_SKIP_JIT=1 DG_GPU_RUN_TEST_WORKERS=${DG_GPU_RUN_TEST_WORKERS:-4} \
    DG_GPU_RUN_TEST_TIMEOUT=${DG_AB_TESTS_TIMEOUT:-240} tools/gpu_run.sh /tmp/ab_tests -m gpu
cp /tmp/ab_tests/all-logs.tgz "$OUT/tests-all-logs.tgz"
collect /tmp/ab_tests/pytest.log /tmp/ab_tests/smoke.log
ls -la "$OUT"
