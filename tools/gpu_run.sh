#!/usr/bin/env bash
# One call on a GPU machine: install, GPU + CPU tests, JIT and host-cost timings, benchmark; logs and JSON to $1.
#   tools/gpu_run.sh OUTDIR [pytest-args...]
# Offline machines: wheels for what the image lacks in .whl/, fetched beforehand on a machine online:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     nvidia-cuda-cuobjdump==13.2.86 nvidia-cuda-nvdisasm==13.2.86 [pytest-xdist execnet]
# Env: DG_GPU_RUN_SKIP_TESTS=1, DG_GPU_RUN_SKIP_BENCH=1, DG_GPU_RUN_SKIP_JIT=1, DG_GPU_RUN_PROFILE=1,
#      DG_BENCH_ARGS="--shapes ...",
#      DG_GPU_RUN_MULTICAST_SHAPES="4096x7168x2048 ..." (after the main bench, these shapes again with
#      DG_FP8_GEMM_MULTICAST=0 and =1 (DG_GPU_RUN_MULTICAST_SETTINGS="1": only =1), to compare the
#      two variants in one run),
#      DG_GPU_RUN_SWEEP="--shapes ... --configs ...[; ...]" (tools/sweep_fp8_gemm.py, last; several separated by ';'),
#      DG_GPU_RUN_PROFILE=source (instead of =1: ncu with per-instruction stall samples of the GEMMs
#      DG_GPU_RUN_NCU_SHAPE="[DG_X=v ...] M N K [--bf16 | --per-row] [--fp32-c]; ...", as ncu-<i>.txt / ncu-source-<i>.csv),
#      DG_GPU_RUN_SANITIZE_TESTS="pytest args" (memcheck of those tests, any profile setting),
#      DG_GPU_RUN_SMOKE_EXTRA="[DG_X=v ...] M N K [profile_gemm.py options]; ..." (more smoke calls).
# (pass `-m gpu` as pytest args to run only the GPU tier: CI runs the CPU tier; DG_GPU_RUN_TEST_PATHS="test_a.py ..."
#  picks test files, default all.)
#      DG_GPU_RUN_TEST_WORKERS=N (pytest-xdist, from .whl: N test processes share the GPU and compile kernels in
#      parallel; the tests assert no timing, so sharing is safe).
#      DG_GPU_RUN_GROUPED_BENCH=1 (the grouped and masked bench suites; DG_GPU_RUN_GROUPED_SUITES="..." picks them).
#      DG_GPU_RUN_MICRO="tma_stream ..." (tools/microbench_<name>.cu built and run, as micro-<name>.log),
#      DG_GPU_RUN_AB_ENV="VAR=value ... [@suite,...]; ..." (after the benches: each bench that ran, or the suites
#      named after '@' (main = the dense bench), again, ours only, under that environment; several A/Bs separated
#      by ';'; tools/bench_ab.py compares them row by row into ab.log).
#      DG_GPU_RUN_OLD_INCLUDE=".ab/include-COMMIT.tar.gz ..." (after the benches: the main bench again, no baselines,
#      with the kernel headers of an earlier commit or of a diagnostic variant, as bench-old-<i>.log / .json, compared
#      with bench.json in ab.log: tools/with_old_headers.sh).
# The device tool returns at most 8 files from $OUT: every step writes into a work folder, and the end
# packs all of it into $OUT/all-logs.tgz and copies the main logs and JSON next to it (7 at most).
# The kernel cache: a carried .jit-prebuilt/kernels.tar.gz is unpacked into it first, and every pack writes the
# sources of its entries as jit-sources.tgz into all-logs.tgz (tools/jit_cache_io.sh, tools/prebuild_jit_cache.py).
set -uo pipefail
FINAL_OUT=$(realpath -m "${1:?usage: tools/gpu_run.sh OUTDIR [pytest-args...]}")
shift
OUT=$(mktemp -d /tmp/gpu_run.XXXXXX)  # the work folder; packed into $FINAL_OUT at the end
mkdir -p "$FINAL_OUT"
pack() {
    jit_cache_sources "$OUT/jit-sources.tgz"  # (tools/prebuild_jit_cache.py: the next run's cache, built on a CPU)
    tar czf "$FINAL_OUT/all-logs.tgz" -C "$OUT" .
    for f in pytest.log bench.log bench.json smoke.log ncu.txt ncu-0.txt sanitizer.txt ab.log sweep-0.log sweep-1.log \
             ${DG_GPU_RUN_GROUPED_SUITES:-kgrouped mqa}; do
        [[ $f == *.* ]] || f=$f.log
        [[ -f "$OUT/$f" ]] && cp "$OUT/$f" "$FINAL_OUT/"
    done
}
trap pack EXIT  # (also after each step below, so that a run killed at its time limit still returns its logs)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 CXX=${CXX:-/usr/bin/g++}
export DG_JIT_CACHE_DIR=${DG_JIT_CACHE_DIR:-/tmp/dg_cache}
source tools/jit_cache_io.sh
jit_cache_unpack

{
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv
    python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
    nvcc --version | tail -2  # (the JIT cache key's compiler identity: a prebuilt cache hits only with the same)
} > "$OUT/env.txt" 2>&1

if [[ -d .whl ]]; then WHEELHOUSE=.whl ./install.sh; else ./install.sh; fi > "$OUT/install.log" 2>&1 || {
    tail -50 "$OUT/install.log"; exit 1; }

# An entry "[DG_X=v ...] rest" of the lists below: its leading settings into $env_part, the rest into $entry
split_settings() {
    env_part="" entry=$(echo $1)
    while [[ $entry == DG_* ]]; do env_part="$env_part ${entry%% *}"; entry=${entry#* }; done
}

# Smoke: one call per kernel variant under a short timeout, so that a hanging or wrong kernel stops
# the run in a minute instead of at every later step's timeout
# (DG_GPU_RUN_SMOKE_EXTRA="[DG_X=v ...] M N K [options]; ...": more entries, e.g. configs never run before)
smokes=("1 2112 7168" "64 4096 7168" "256 7168 2048" "4096 7168 2048" "DG_FP8_GEMM_MULTICAST=1 1024 7168 2048"
        "DG_FP8_GEMM_STREAM_K=1 4096 4096 7168" "300 2112 7168 --bf16" "1000 1000 1024 --bf16 --fp32-c")
IFS=';' read -ra extra_smokes <<< "${DG_GPU_RUN_SMOKE_EXTRA:-}"
for extra in "${extra_smokes[@]}"; do extra=$(echo $extra); [[ -n $extra ]] && smokes+=("$extra"); done
for smoke_entry in "${smokes[@]}"; do
    split_settings "$smoke_entry"; smoke=$entry
    if ! env $env_part DG_PRINT_CONFIGS=1 timeout 90 python3 tools/profile_gemm.py $smoke --calls 2 >> "$OUT/smoke.log" 2>&1; then
        echo "smoke test failed: $env_part $smoke"; tail -20 "$OUT/smoke.log"; exit 1
    fi
done
grep -h "calc_diff\|sm90_gemm m=" "$OUT/smoke.log"
pack

if [[ -z "${DG_GPU_RUN_SKIP_TESTS:-}" ]]; then
    workers=()
    if [[ -n "${DG_GPU_RUN_TEST_WORKERS:-}" ]]; then
        python3 -c "import xdist" 2>/dev/null || python3 -m pip install -q --no-index --no-deps .whl/execnet-*.whl \
            .whl/pytest_xdist-*.whl >> "$OUT/install.log" 2>&1
        workers=(-n "$DG_GPU_RUN_TEST_WORKERS")
    fi
    (cd tests && timeout ${DG_GPU_RUN_TEST_TIMEOUT:-420} python3 -m pytest -q --durations=15 -p no:cacheprovider --timeout=150 --timeout_method=thread "${workers[@]}" "$@" ${DG_GPU_RUN_TEST_PATHS:-.}) > "$OUT/pytest.log" 2>&1
    echo "pytest exit code $?"; tail -25 "$OUT/pytest.log"
fi
pack
if [[ "${DG_GPU_RUN_PROFILE:-}" == "source" ]]; then
    # Per-instruction warp-stall samples of each GEMM named in DG_GPU_RUN_NCU_SHAPE ("M N K [profile_gemm.py
    # options]", several separated by ';'): the GEMM kernel, as ncu-<i>.txt and
    # the SASS source page ncu-source-<i>.csv
    IFS=';' read -ra ncu_shapes <<< "${DG_GPU_RUN_NCU_SHAPE:-4096 7168 7168}"
    for i in "${!ncu_shapes[@]}"; do
        split_settings "${ncu_shapes[$i]}"; shape=$entry
        timeout 200 env $env_part ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
            --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section SourceCounters \
            --section LaunchStats -k regex:sm90_gemm -s 2 -c 2 -o "$OUT/profile-$i" \
            python3 tools/profile_gemm.py $shape > "$OUT/ncu-$i.txt" 2>&1
        ncu --import "$OUT/profile-$i.ncu-rep" --print-summary none >> "$OUT/ncu-$i.txt" 2>&1
        ncu --import "$OUT/profile-$i.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu-source-$i.csv" 2>&1
        rm -f "$OUT/profile-$i.ncu-rep"
        echo "ncu$env_part $shape:"; grep -E "^  [a-z_0-9]+.*\(|Duration|SM Frequency|Memory Throughput|Compute \(SM\) Throughput" "$OUT/ncu-$i.txt" | head -12
    done
    pack
elif [[ -n "${DG_GPU_RUN_PROFILE:-}" ]]; then
    # Hardware counters (with warp stall reasons) of a large GEMM, plain and with 2-CTA multicast, and of a
    # split-K decode GEMM (both of its kernels); memcheck of small ones (odd tile pairs, direct stores)
    {
        for multicast in 0 1; do
            DG_FP8_GEMM_MULTICAST=$multicast timeout 150 ncu --clock-control none --section SpeedOfLight \
                --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
                -k regex:sm90_gemm -s 1 -c 1 python3 tools/profile_gemm.py 4096 7168 7168
        done
        timeout 150 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
            --section WarpStateStats --section LaunchStats -k regex:sm90_gemm -s 2 -c 2 \
            python3 tools/profile_gemm.py 1 2112 7168
    } > "$OUT/ncu.txt" 2>&1
    for shape in "300 2112 7168" "129 1001 1040" "1 2112 7168"; do
        timeout 120 compute-sanitizer --tool memcheck python3 tools/profile_gemm.py $shape --calls 1
    done > "$OUT/sanitizer.txt" 2>&1
    grep -E "ERROR SUMMARY|calc_diff" "$OUT/sanitizer.txt"
    pack
fi
if [[ -n "${DG_GPU_RUN_SANITIZE_TESTS:-}" ]]; then
    # memcheck of the tests named (pytest arguments, run from tests/)
    (cd tests && timeout ${DG_GPU_RUN_SANITIZE_TIMEOUT:-240} compute-sanitizer --tool memcheck python3 -m pytest -q -x \
        -p no:cacheprovider $DG_GPU_RUN_SANITIZE_TESTS) > "$OUT/sanitizer.txt" 2>&1
    grep -E "ERROR SUMMARY|passed|failed" "$OUT/sanitizer.txt" | tail -3
    pack
fi
if [[ -z "${DG_GPU_RUN_SKIP_JIT:-}" ]]; then
    # Cold and warm compiles (NVCC, NVRTC) and the host cost of one cached call (docs/perf/jit.md), ~20 s
    timeout 180 python3 tools/measure_jit.py --json "$OUT/jit.json" > "$OUT/jit.log" 2>&1
    echo "measure_jit exit code $?"
    grep -E '"(seconds|[a-z_]*us_per_call)"' "$OUT/jit.log" | tr -s ' ' | paste -sd' '
    pack
fi
if [[ -z "${DG_GPU_RUN_SKIP_BENCH:-}" ]]; then
    (cd /tmp && timeout 300 python3 -m deep_gemm.bench --json "$OUT/bench.json" ${DG_BENCH_ARGS:-}) > "$OUT/bench.log" 2>&1
    echo "bench exit code $?"; tail -60 "$OUT/bench.log"
fi
pack
if [[ -n "${DG_GPU_RUN_GROUPED_BENCH:-}" ]]; then
    for suite in ${DG_GPU_RUN_GROUPED_SUITES:-grouped masked}; do
        (cd /tmp && timeout ${DG_GPU_RUN_SUITE_TIMEOUT:-300} python3 -m deep_gemm.bench \
            --suite $suite --json "$OUT/$suite.json" ${DG_GROUPED_BENCH_ARGS:-}) > "$OUT/$suite.log" 2>&1
        echo "$suite bench exit code $?"; tail -30 "$OUT/$suite.log"
        pack
    done
fi
if [[ -n "${DG_GPU_RUN_MULTICAST_SHAPES:-}" ]]; then
    for multicast in ${DG_GPU_RUN_MULTICAST_SETTINGS:-0 1}; do
        (cd /tmp && DG_FP8_GEMM_MULTICAST=$multicast timeout 200 python3 -m deep_gemm.bench --no-baselines --json "$OUT/bench-multicast$multicast.json" \
            --shapes $DG_GPU_RUN_MULTICAST_SHAPES) > "$OUT/bench-multicast$multicast.log" 2>&1
        echo "multicast=$multicast bench exit code $?"; tail -12 "$OUT/bench-multicast$multicast.log"
    done
fi
if [[ -n "${DG_GPU_RUN_OLD_INCLUDE:-}" ]]; then
    # (several tarballs separated by spaces: bench-old-<i>.log / .json, each compared with bench.json in ab.log)
    read -ra old_includes <<< "$DG_GPU_RUN_OLD_INCLUDE"
    for i in "${!old_includes[@]}"; do
        tools/with_old_headers.sh "${old_includes[$i]}" timeout 300 python3 -m deep_gemm.bench --no-baselines \
            --json "$OUT/bench-old-$i.json" ${DG_BENCH_ARGS:-} > "$OUT/bench-old-$i.log" 2>&1
        echo "bench with headers ${old_includes[$i]} exit code $?"; tail -30 "$OUT/bench-old-$i.log"
        [[ -f "$OUT/bench.json" ]] && python3 tools/bench_ab.py "$OUT/bench.json" "$OUT/bench-old-$i.json" \
            --names default "$(basename "${old_includes[$i]}" .tar.gz)" >> "$OUT/ab.log" 2>&1 && tail -1 "$OUT/ab.log"
        pack
    done
fi
if [[ -n "${DG_GPU_RUN_MICRO:-}" ]]; then
    # Standalone microbenchmarks, tools/microbench_<name>.cu, each built with nvcc and run (micro-<name>.log)
    for name in $DG_GPU_RUN_MICRO; do
        { nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -I deep_gemm/include "tools/microbench_$name.cu" \
              -o "/tmp/microbench_$name" && timeout 120 "/tmp/microbench_$name"; } > "$OUT/micro-$name.log" 2>&1
        echo "microbenchmark $name exit code $?"; tail -45 "$OUT/micro-$name.log"
        pack
    done
fi
if [[ -n "${DG_GPU_RUN_AB_ENV:-}" ]]; then
    # The same benches again (ours only) under another environment, e.g. DG_FP8_GEMM_OVERLAP=0: an A/B in one run.
    # Several A/Bs separated by ';', each "VAR=value ... [@suite,suite]" (default: every bench that ran)
    IFS=';' read -ra ab_specs <<< "$DG_GPU_RUN_AB_ENV"
    for i in "${!ab_specs[@]}"; do
        spec=${ab_specs[$i]}; ab_env=${spec%%@*}
        suites=main; [[ -n "${DG_GPU_RUN_GROUPED_BENCH:-}" ]] && suites="main ${DG_GPU_RUN_GROUPED_SUITES:-grouped masked}"
        [[ $spec == *@* ]] && suites=${spec#*@} && suites=${suites//,/ }
        for suite in $suites; do
            name=$([[ $suite == main ]] && echo bench || echo $suite)
            args=$([[ $suite == main ]] && echo "${DG_BENCH_ARGS:-}" || echo "--suite $suite ${DG_GROUPED_BENCH_ARGS:-}")
            [[ -f "$OUT/$name.json" ]] || continue
            (cd /tmp && env $ab_env timeout ${DG_GPU_RUN_SUITE_TIMEOUT:-300} python3 -m deep_gemm.bench \
                --no-baselines --json "$OUT/$name-ab$i.json" $args) > "$OUT/$name-ab$i.log" 2>&1
            python3 tools/bench_ab.py "$OUT/$name.json" "$OUT/$name-ab$i.json" --names default "$ab_env" \
                >> "$OUT/ab.log" 2>&1
            echo "A/B $suite ($ab_env):"; tail -1 "$OUT/ab.log"
            pack
        done
    done
fi
if [[ -n "${DG_GPU_RUN_SWEEP:-}" ]]; then
    # (several sweeps separated by ';': sweep-<i>.log / .json)
    IFS=';' read -ra sweeps <<< "$DG_GPU_RUN_SWEEP"
    for i in "${!sweeps[@]}"; do
        timeout ${DG_GPU_RUN_SWEEP_TIMEOUT:-400} python3 tools/sweep_fp8_gemm.py --json "$OUT/sweep-$i.json" ${sweeps[$i]} \
            > "$OUT/sweep-$i.log" 2>&1
        echo "sweep $i exit code $?"; tail -40 "$OUT/sweep-$i.log"
        pack
    done
fi
