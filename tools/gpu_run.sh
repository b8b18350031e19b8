#!/usr/bin/env bash
# The GPU check in one call: install, a smoke call per GEMM kind, the GPU tests (FP8, BF16, grouped, MQA),
# JIT and host-cost timings, every bench suite (JSON and perf.md); logs into the folder given.
#   tools/gpu_run.sh OUTDIR [pytest-args...]          (e.g. tools/gpu_run.sh /tmp/out -k paged)
# OUTDIR gets summary.txt (one line per step), perf.md (the bench tables, python -m deep_gemm.bench --markdown),
# each suite's JSON, and logs/ with every log; logs.tgz packs logs/ after each step, so a run killed at a time
# limit still leaves its logs in one file.
# Offline machines: wheels of what the image lacks in .whl/ (the README's `pip download` list); a
# .jit-prebuilt/kernels.tar.gz (tools/prebuild_jit_cache.py) is unpacked into the kernel cache first.
# Environment (all optional):
#   DG_GPU_RUN_SKIP_INSTALL=1   keep the package an earlier gpu_run.sh installed on this machine (source unchanged)
#   DG_GPU_RUN_SKIP_TESTS=1 / DG_GPU_RUN_SKIP_JIT=1 / DG_GPU_RUN_SKIP_BENCH=1 / DG_GPU_RUN_SKIP_SMOKE=1   skip that step
#   DG_GPU_RUN_TEST_PATHS="test_a.py ..."   test files (default: all); pytest runs `-m gpu` plus the given args
#   DG_GPU_RUN_TEST_WORKERS=N               N pytest-xdist processes (wheels in .whl/); they share the GPU and
#                                           compile kernels in parallel (the tests assert no timing)
#   DG_GPU_RUN_TEST_CASE_TIMEOUT=S          seconds one test may take (default 300; pytest-timeout from .whl/)
#   DG_GPU_RUN_SUITES="dense mqa ..."       bench suites (default: every suite of python -m deep_gemm.bench --list)
#   DG_BENCH_ARGS="--num-tests 10 ..."      extra arguments of every bench call
#   DG_GPU_RUN_SANITIZE="pytest args"       those tests under compute-sanitizer, each tool of
#                                           DG_GPU_RUN_SANITIZERS (default: memcheck racecheck synccheck)
#   DG_GPU_RUN_NCU="M N K [profile_gemm.py options]; ..."   ncu counters and per-SASS-line stall samples of each
#                                           GEMM (tools/profile_gemm.py), as ncu-<i>.txt / ncu-source-<i>.csv
#   DG_GPU_RUN_OLD_INCLUDE=".ab/include-COMMIT.tar.gz ..."  the dense bench again (ours only) with an earlier
#                                           commit's kernel headers (tools/with_old_headers.sh), compared row by
#                                           row with this tree's in ab.log (tools/bench_ab.py)
#   DG_GPU_RUN_REFERENCE=WHEEL                 the reference package's wheel (e.g. .whl/sgl_deep_gemm-*.whl) timed
#                                           against ours on issue #48's calls (tools/bench_vs_reference.py):
#                                           vs-reference.md; DG_GPU_RUN_REFERENCE_FAMILIES=dense,... picks families
#   DG_GPU_RUN_SWEEP="--shapes ... --configs ...; ..."      tools/sweep_fp8_gemm.py calls, as sweep-<i>.json
#   DG_GPU_RUN_TEST_TIMEOUT / _SANITIZE_TIMEOUT / _SUITE_TIMEOUT / _SWEEP_TIMEOUT=S   seconds for the whole test
#                                           step (default 1200), each sanitizer tool (300), each bench suite (400),
#                                           each sweep (400)
set -uo pipefail
OUT=$(realpath -m "${1:?usage: tools/gpu_run.sh OUTDIR [pytest-args...]}")
shift
L=$OUT/logs
mkdir -p "$L"
cd "$(dirname "$0")/.."
ROOT=$PWD
export PYTHONUNBUFFERED=1 CXX=${CXX:-/usr/bin/g++} DG_JIT_CACHE_DIR=${DG_JIT_CACHE_DIR:-/tmp/dg_cache}
source tools/jit_cache_io.sh
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
pack() {  # the kernel cache's sources (tools/prebuild_jit_cache.py's input), then every log in one tarball
    jit_cache_sources "$L/jit-sources.tgz"
    tar -C "$OUT" -czf "$OUT/logs.tgz" logs
}
trap pack EXIT

{
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv
    python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
    nvcc --version | tail -2  # (the JIT cache key's compiler identity: a prebuilt cache hits only with the same)
} > "$L/env.txt" 2>&1
note "$(sed -n 2p "$L/env.txt")"

if [[ -n "${DG_GPU_RUN_SKIP_INSTALL:-}" ]] && (cd /tmp && python3 -c "import deep_gemm") 2>/dev/null; then
    note "install skipped (DG_GPU_RUN_SKIP_INSTALL: the package an earlier run installed on this machine)"
elif [[ -d .whl ]]; then WHEELHOUSE=.whl ./install.sh > "$L/install.log" 2>&1; else ./install.sh > "$L/install.log" 2>&1; fi || {
    note "install failed"; tail -50 "$L/install.log"; exit 1; }
jit_cache_unpack | tee -a "$OUT/summary.txt"

# Smoke: one call per GEMM kind under a short timeout, so that a hanging or wrong kernel stops the run in a
# minute instead of at every later step's timeout
[[ -n "${DG_GPU_RUN_SKIP_SMOKE:-}" ]] || for smoke in "1 2112 7168" "64 4096 7168" "256 7168 2048" "4096 7168 2048" "4096 4096 7168" "300 2112 7168 --bf16" \
             "1000 1000 1024 --bf16 --fp32-c" "4096 7168 2048 --per-row --fp32-c"; do
    if ! DG_PRINT_CONFIGS=1 timeout 90 python3 tools/profile_gemm.py $smoke --calls 2 >> "$L/smoke.log" 2>&1; then
        note "smoke call failed: $smoke"; tail -20 "$L/smoke.log"; exit 1
    fi
done
[[ -n "${DG_GPU_RUN_SKIP_SMOKE:-}" ]] || note "smoke: $(grep -c calc_diff "$L/smoke.log") calls checked"
pack

if [[ -z "${DG_GPU_RUN_SKIP_TESTS:-}" ]]; then
    workers=()
    if [[ -n "${DG_GPU_RUN_TEST_WORKERS:-}" ]]; then
        python3 -c "import xdist" 2>/dev/null || python3 -m pip install -q --no-index --no-deps .whl/execnet-*.whl \
            .whl/pytest_xdist-*.whl >> "$L/install.log" 2>&1
        workers=(-n "$DG_GPU_RUN_TEST_WORKERS")
    fi
    # A test past DG_GPU_RUN_TEST_CASE_TIMEOUT seconds (a kernel that hangs) ends its process (pytest-timeout's
    # thread method: a hung CUDA call never returns to Python); with workers, xdist reports it and starts another
    python3 -c "import pytest_timeout" 2>/dev/null || python3 -m pip install -q --no-index --no-deps \
        .whl/pytest_timeout-*.whl >> "$L/install.log" 2>&1
    python3 -c "import pytest_timeout" 2>/dev/null && \
        workers+=(--timeout "${DG_GPU_RUN_TEST_CASE_TIMEOUT:-300}" --timeout-method thread)
    (cd tests && timeout "${DG_GPU_RUN_TEST_TIMEOUT:-1200}" python3 -m pytest -q -m gpu --durations=15 \
        -p no:cacheprovider "${workers[@]}" "$@" ${DG_GPU_RUN_TEST_PATHS:-.}) > "$L/pytest.log" 2>&1
    note "pytest rc=$? $(tail -1 "$L/pytest.log")"
    pack
fi

if [[ -n "${DG_GPU_RUN_SANITIZE:-}" ]]; then
    for tool in ${DG_GPU_RUN_SANITIZERS:-memcheck racecheck synccheck}; do
        (cd tests && timeout "${DG_GPU_RUN_SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
            python3 -m pytest -q -x -p no:cacheprovider $DG_GPU_RUN_SANITIZE) > "$L/sanitizer-$tool.txt" 2>&1
        note "sanitizer $tool rc=$? $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/sanitizer-$tool.txt")"
    done
    pack
fi

if [[ -z "${DG_GPU_RUN_SKIP_JIT:-}" ]]; then
    # Cold and warm compiles (NVCC, NVRTC) and the host cost of one cached call, ~20 s
    timeout 180 python3 tools/measure_jit.py --json "$OUT/jit.json" > "$L/jit.log" 2>&1
    note "measure_jit rc=$?"
    pack
fi

if [[ -z "${DG_GPU_RUN_SKIP_BENCH:-}" ]]; then
    # (the multi-GPU suites only where there are several GPUs)
    multi_gpu_suites=$([[ $(nvidia-smi -L 2>/dev/null | wc -l) -ge 2 ]] || echo mega_moe_dist)
    suites=${DG_GPU_RUN_SUITES:-$(cd /tmp && python3 -m deep_gemm.bench --list | cut -d: -f1 | grep -vxF "${multi_gpu_suites:-_}")}
    reports=()
    for suite in $suites; do
        # (run from /tmp: the installed package, not the source folder)
        (cd /tmp && timeout "${DG_GPU_RUN_SUITE_TIMEOUT:-400}" python3 -m deep_gemm.bench --suite "$suite" \
            --json "$OUT/$suite.json" ${DG_BENCH_ARGS:-}) > "$L/bench-$suite.log" 2>&1
        note "bench $suite rc=$? $(grep -m1 -i geomean "$L/bench-$suite.log")"
        [[ -f "$OUT/$suite.json" ]] && reports+=("$OUT/$suite.json")
        pack
    done
    [[ ${#reports[@]} -gt 0 ]] && (cd /tmp && python3 -m deep_gemm.bench --from-json "${reports[@]}" \
        --markdown "$OUT/perf.md") >> "$L/bench-markdown.log" 2>&1
fi

if [[ -n "${DG_GPU_RUN_REFERENCE:-}" ]]; then
    # The reference package (a wheel installing `deep_gemm`) in its own folder, timed in a separate process with
    # its own kernel cache on the same calls as ours (tools/bench_vs_reference.py); ratio table in vs-reference.md
    ref_dir=/tmp/dg-reference
    python3 -m pip install -q --no-deps --target "$ref_dir" "$DG_GPU_RUN_REFERENCE" > "$L/reference-install.log" 2>&1
    fams=${DG_GPU_RUN_REFERENCE_FAMILIES:-dense,contiguous,masked,wgrad,kgrouped,mqa,paged,bf16_contiguous,bf16_masked}
    # JIT warm-up first: one process per family and package in parallel (the compiles dominate), then the timing
    for fam in ${fams//,/ }; do
        (cd /tmp && PYTHONPATH=$ref_dir DG_JIT_CACHE_DIR=/tmp/dg-reference-cache timeout 400 python3 \
            "$ROOT/tools/bench_vs_reference.py" --warm-only --families "$fam") > "$L/reference-warm-$fam.log" 2>&1 &
        (cd /tmp && timeout 400 python3 "$ROOT/tools/bench_vs_reference.py" --warm-only --families "$fam") \
            > "$L/reference-warm-ours-$fam.log" 2>&1 &
    done
    wait
    (cd /tmp && PYTHONPATH=$ref_dir DG_JIT_CACHE_DIR=/tmp/dg-reference-cache timeout 500 python3 \
        "$ROOT/tools/bench_vs_reference.py" --label reference --families "$fams" --json "$OUT/vs-ref-reference.json") \
        > "$L/reference-bench.log" 2>&1
    note "reference bench rc=$?"
    (cd /tmp && timeout 500 python3 "$ROOT/tools/bench_vs_reference.py" --label ours --families "$fams" \
        --json "$OUT/vs-ref-ours.json") > "$L/reference-ours.log" 2>&1
    note "ours on the reference calls rc=$?"
    python3 tools/bench_vs_reference.py --compare "$OUT/vs-ref-reference.json" "$OUT/vs-ref-ours.json" \
        --markdown "$OUT/vs-reference.md" > /dev/null 2>&1 && note "$(tail -12 "$OUT/vs-reference.md")"
    pack
fi

if [[ -n "${DG_GPU_RUN_NCU:-}" ]]; then
    IFS=';' read -ra ncu_shapes <<< "$DG_GPU_RUN_NCU"
    for i in "${!ncu_shapes[@]}"; do
        shape=$(echo ${ncu_shapes[$i]})
        DG_JIT_WITH_LINEINFO=1 timeout 200 ncu --clock-control none --section SpeedOfLight \
            --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats \
            --section SchedulerStats --section SourceCounters --section LaunchStats -k regex:sm90_ -s 2 -c 2 \
            -o "$L/profile-$i" python3 tools/profile_gemm.py $shape > "$L/ncu-$i.txt" 2>&1
        note "ncu $shape rc=$?"
        ncu --import "$L/profile-$i.ncu-rep" --print-summary none >> "$L/ncu-$i.txt" 2>&1
        ncu --import "$L/profile-$i.ncu-rep" --page source --csv --print-source sass > "$L/ncu-source-$i.csv" 2>&1
        rm -f "$L/profile-$i.ncu-rep"
    done
    pack
fi

if [[ -n "${DG_GPU_RUN_OLD_INCLUDE:-}" && -f "$OUT/dense.json" ]]; then
    read -ra old_includes <<< "$DG_GPU_RUN_OLD_INCLUDE"
    for i in "${!old_includes[@]}"; do
        tools/with_old_headers.sh "${old_includes[$i]}" timeout 400 python3 -m deep_gemm.bench --no-baselines \
            --json "$OUT/dense-old-$i.json" ${DG_BENCH_ARGS:-} > "$L/bench-old-$i.log" 2>&1
        note "bench with headers ${old_includes[$i]} rc=$?"
        python3 tools/bench_ab.py "$OUT/dense.json" "$OUT/dense-old-$i.json" \
            --names this "$(basename "${old_includes[$i]}" .tar.gz)" >> "$L/ab.log" 2>&1 && note "$(tail -1 "$L/ab.log")"
        pack
    done
fi

if [[ -n "${DG_GPU_RUN_SWEEP:-}" ]]; then
    IFS=';' read -ra sweeps <<< "$DG_GPU_RUN_SWEEP"
    for i in "${!sweeps[@]}"; do
        timeout "${DG_GPU_RUN_SWEEP_TIMEOUT:-400}" python3 "$ROOT/tools/sweep_fp8_gemm.py" --json "$OUT/sweep-$i.json" \
            ${sweeps[$i]} > "$L/sweep-$i.log" 2>&1
        note "sweep $i rc=$?"
        pack
    done
fi
