#!/usr/bin/env bash
# On a GPU machine: install, then the MQA steps named in DG_MQA_STEPS (default: all, in this order):
#   tests     the MQA GPU tests (paged ones also with a 6-stage ring: every stage reused often); DG_MQA_TESTS_K: a
#             pytest -k expression that picks some of the first set
#   bench     python -m deep_gemm.bench --suite mqa (no baselines), mqa.json / mqa.log; DG_MQA_BENCH_SHAPES: only those
#   bench-torch the prefill rows with the chunked PyTorch baseline too (the speedup column), mqa-torch.json
#   ab-paged    the paged rows with DG_TUNE=paged_mqa_logits:math_wgs=2
#   ab-kv-split the prefill rows (and the H = 32 row) at each key chunk per CTA of DG_KV_SPLITS (default
#               "2048 8192 16384", DG_TUNE=mqa_logits:kv_split=C; the heuristic's is in the bench step) (mqa-kv<C>.json)
#   sanitize  memcheck, racecheck, synccheck on small prefill and paged cases
#   ncu       hardware counters and per-SASS-line stall samples (source page CSV) of the kernels named in
#             DG_NCU_KERNELS (default "paged prefill"; also "meta": the schedule kernel, cold caches, and
#             "paged-short": the paged kernel on 64 x 2 x 8192; "paged-256": on 256 x 1 x 65536; "paged-64x2": on
#             64 x 2 x 65536; "prefill-long": 2048 x 65536 causal;
#             "prefill-cp": 2048 x 65536 context-parallel, "prefill-window": the same with the window pattern)
#   balance   per-SM busy cycles (sm__cycles_active min / avg / max) and DRAM throughput of the kernel on each shape
#             of DG_BALANCE_SHAPES (default: the paged rows at 65536 keys and two prefill rows): max / avg > 1 is
#             the share of the call its slowest SM adds over an even spread (balance.txt, in the summary)
#   sweep     the paged rows at DG_SWEEP_STAGES kv stages (default 6 12)
#   probe     tools/paged_schedule_probe.py: the paged kernel's device time under schedules that charge each request
#             DG_PROBE_COSTS kv blocks (default "0 8 16 32 64") on DG_PROBE_SHAPES (probe.txt, in the summary)
#   micro     tools/microbench_head_sum.cu: per-SM throughput of F2FP (relu + BF16 pack), FMNMX, FFMA, and the
#             cycles of a register-A wgmma m64n8k16 and of an m64n256k32 FP8 wgmma (micro.txt, in the summary)
#   ab-old    every row with the kernel headers of DG_AB_OLD_INCLUDE (a tarball of deep_gemm/include from an
#             earlier commit: git archive COMMIT deep_gemm/include | gzip > .ab/include.tar.gz, carried), the
#             host code unchanged: a same-run baseline for a kernel change (mqa-old.json / mqa-old.log); only the
#             shapes of DG_AB_OLD_SHAPES when set
# Everything but summary.txt and the JSON files is packed into logs.tar.gz, with the kernel cache's sources
# (logs/jit-sources.tgz; a carried .jit-prebuilt/kernels.tar.gz is unpacked into the cache first: tools/jit_cache_io.sh).
# Usage: tools/mqa_gpu_run.sh OUT
set -u
OUT=${1:?usage: tools/mqa_gpu_run.sh OUT_DIR}
STEPS=" ${DG_MQA_STEPS:-tests bench ab-paged sanitize ncu sweep} "
mkdir -p "$OUT/logs"
L=$OUT/logs
export PYTHONUNBUFFERED=1 CXX=${CXX:-/usr/bin/g++} DG_JIT_CACHE_DIR=${DG_JIT_CACHE_DIR:-/tmp/dgc}
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
source tools/jit_cache_io.sh  # (a carried prebuilt cache in; the cache's sources out as logs/jit-sources.tgz)
pack() { jit_cache_sources "$L/jit-sources.tgz"; tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs; }
WHEELHOUSE=${WHEELHOUSE:-.whl} ./install.sh > "$L/install.log" 2>&1 || { note install failed; tail -30 "$L/install.log"; pack; exit 1; }
jit_cache_unpack | tee -a "$OUT/summary.txt"
ROOT=$PWD
PAGED="paged:64x1x8192 paged:64x1x65536 paged:64x2x8192 paged:64x2x65536 paged:256x1x8192 paged:256x1x65536 \
paged:256x2x8192 paged:256x2x65536"
PREFILL="2048x8192 2048x65536 8192x8192 8192x65536 2048x8192-cp 2048x65536-cp 8192x8192-cp 8192x65536-cp \
2048x8192-window 2048x65536-window 8192x8192-window 8192x65536-window"
RUNNER=()  # a command prefix for bench (ab-old: tools/with_old_headers.sh TARBALL)
bench() {  # bench NAME [shapes...]: the mqa suite (or those shapes) into NAME.log / NAME.json
    local name=$1; shift
    local shapes=()
    [[ $# -gt 0 ]] && shapes=(--shapes "$@")
    (cd /tmp && "${RUNNER[@]}" timeout 200 python3 -m deep_gemm.bench --suite mqa --no-baselines --num-tests 10 \
        "${shapes[@]}" --json "$OUT/$name.json" > "$L/$name.log" 2>&1)
    note "bench $name rc=$?"
}
if [[ $STEPS == *" tests "* ]]; then
    pick=()
    [[ -n ${DG_MQA_TESTS_K:-} ]] && pick=(-k "$DG_MQA_TESTS_K")
    (cd tests && timeout 300 python3 -m pytest -q -m gpu "${pick[@]}" test_mqa_logits.py > "$L/pytest.log" 2>&1)
    note "pytest rc=$? $(tail -1 "$L/pytest.log")"
    (cd tests && DG_TUNE=paged_mqa_logits:stages=6 timeout 120 python3 -m pytest -q -m gpu \
        -k "paged_against or paged_any or paged_unclean or paged_clean" test_mqa_logits.py > "$L/pytest-stages6.log" 2>&1)
    note "pytest stages=6 rc=$? $(tail -1 "$L/pytest-stages6.log")"
fi
[[ $STEPS == *" bench "* ]] && bench mqa ${DG_MQA_BENCH_SHAPES:-}
if [[ $STEPS == *" bench-torch "* ]]; then
    (cd /tmp && timeout 400 python3 -m deep_gemm.bench --suite mqa --num-tests 10 --shapes $PREFILL \
        --json "$OUT/mqa-torch.json" > "$L/mqa-torch.log" 2>&1)
    note "bench-torch rc=$? $(grep -m1 'speedup vs chunked' "$L/mqa-torch.log")"
fi
if [[ $STEPS == *" ab-kv-split "* ]]; then
    for c in ${DG_KV_SPLITS:-2048 8192 16384}; do
        DG_TUNE=mqa_logits:kv_split=$c bench "mqa-kv$c" $PREFILL 4096x16384x32x128
    done
fi
[[ $STEPS == *" ab-paged "* ]] && DG_TUNE=paged_mqa_logits:math_wgs=2 bench mqa-paged-2wgs $PAGED
if [[ $STEPS == *" micro "* ]]; then
    nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -I deep_gemm/include tools/microbench_head_sum.cu \
        -o /tmp/microbench_head_sum > "$L/micro-build.txt" 2>&1 && timeout 60 /tmp/microbench_head_sum > "$L/micro.txt" 2>&1
    note "micro rc=$?"; cat "$L/micro.txt" >> "$OUT/summary.txt"
fi
if [[ $STEPS == *" ab-old "* ]]; then
    RUNNER=("$ROOT/tools/with_old_headers.sh" "$(realpath "${DG_AB_OLD_INCLUDE:?ab-old needs DG_AB_OLD_INCLUDE}")")
    note "ab-old package: $("${RUNNER[@]}" python3 -c 'import deep_gemm; print(deep_gemm.__file__)')"
    bench mqa-old ${DG_AB_OLD_SHAPES:-}  # shapes (e.g. the prefill rows: $PREFILL), default all
    RUNNER=()
fi
pack
if [[ $STEPS == *" sanitize "* ]]; then
    for tool in ${DG_SANITIZERS:-memcheck racecheck synccheck}; do
        (cd tests && timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m pytest -q -x \
            "test_mqa_logits.py::test_paged_against_float64[b16-t2-h32-d64-bkv64-ctx3000]" \
            "test_mqa_logits.py::test_paged_against_float64[b16-t4-h32-d128-bkv64-ctx3000]" \
            "test_mqa_logits.py::test_paged_against_float64[b16-t1-h16-d64-bkv32-ctx3000]" \
            "test_mqa_logits.py::test_paged_metadata_cuda_kernel_graph_replay" \
            "test_mqa_logits.py::test_paged_metadata_cuda_kernel_matches_cpu[5000-1d]" \
            "test_mqa_logits.py::test_small_shapes_against_references[causal-64-128]" \
            "test_mqa_logits.py::test_small_shapes_against_references[random-32-128]" \
            "test_mqa_logits.py::test_small_shapes_against_references[random-16-64]" > "$L/sanitizer-$tool.txt" 2>&1)
        note "sanitizer $tool rc=$? $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/sanitizer-$tool.txt")"
    done
    pack
fi
if [[ $STEPS == *" ncu "* ]]; then
    # name, kernel regex, bench shape
    for spec in "paged sm90_fp8_paged_mqa_logits_kernel paged:64x1x65536" \
                "paged-256 sm90_fp8_paged_mqa_logits_kernel paged:256x1x65536" \
                "paged-64x2 sm90_fp8_paged_mqa_logits_kernel paged:64x2x65536" \
                "prefill sm90_fp8_mqa_logits_kernel 2048x8192x64x128-causal" \
                "meta paged_mqa_schedule_kernel paged:64x1x8192" \
                "paged-short sm90_fp8_paged_mqa_logits_kernel paged:64x2x8192" \
                "prefill-long sm90_fp8_mqa_logits_kernel 2048x65536x64x128-causal" \
                "prefill-cp sm90_fp8_mqa_logits_kernel 2048x65536x64x128-cp" \
                "prefill-window sm90_fp8_mqa_logits_kernel 2048x65536x64x128-window"; do
        read -r name kernel shape env_part <<< "$spec"
        [[ " ${DG_NCU_KERNELS:-paged prefill} " == *" $name "* ]] || continue
        (cd /tmp && env ${env_part:-} DG_JIT_WITH_LINEINFO=1 timeout 150 ncu --clock-control none --section SpeedOfLight \
            --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats \
            --section SchedulerStats --section SourceCounters -k "regex:$kernel" -s 1 -c 1 -o "$L/ncu-$name" \
            python3 -m deep_gemm.bench --suite mqa --shapes "$shape" --no-baselines --num-tests 1 --num-warmups 0 \
            > "$L/ncu-$name-run.txt" 2>&1)
        note "ncu $name rc=$?"
        ncu --import "$L/ncu-$name.ncu-rep" --print-summary none --print-details all > "$L/ncu-$name.txt" 2>&1
        ncu --import "$L/ncu-$name.ncu-rep" --page source --csv --print-source sass > "$L/ncu-$name-source.csv" 2>&1
        rm -f "$L/ncu-$name.ncu-rep"
    done
    pack
fi
if [[ $STEPS == *" balance "* ]]; then
    metrics=sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,gpu__time_duration.sum
    metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second
    for shape in ${DG_BALANCE_SHAPES:-paged:64x1x65536 paged:256x1x65536 paged:64x2x65536 paged:256x2x65536 \
                 paged:64x1x8192 2048x65536-causal 8192x8192-causal}; do
        kernel=sm90_fp8_mqa_logits_kernel
        [[ $shape == paged:* ]] && kernel=sm90_fp8_paged_mqa_logits_kernel
        echo "== $shape" >> "$OUT/balance.txt"
        (cd /tmp && timeout 120 ncu --clock-control none --metrics "$metrics" -k "regex:$kernel" -s 2 -c 1 \
            python3 -m deep_gemm.bench --suite mqa --shapes "$shape" --no-baselines --num-tests 1 --num-warmups 2 \
            2>&1 | grep -E "sm__|gpu__|dram__" >> "$OUT/balance.txt")
    done
    cat "$OUT/balance.txt" >> "$OUT/summary.txt"
fi
if [[ $STEPS == *" sweep "* ]]; then
    for s in ${DG_SWEEP_STAGES:-6 12}; do
        DG_TUNE=paged_mqa_logits:stages=$s bench "mqa-stages$s" paged:64x2x8192 paged:64x1x65536 paged:256x2x65536
    done
    pack
fi
if [[ $STEPS == *" probe "* ]]; then
    (cd /tmp && timeout 240 python3 "$ROOT/tools/paged_schedule_probe.py" --costs ${DG_PROBE_COSTS:-0 8 16 32 64} \
        --shapes ${DG_PROBE_SHAPES:-64x2x65536 64x1x65536 256x2x65536 64x2x8192} > "$OUT/probe.txt" 2>&1)
    note "probe rc=$?"; cat "$OUT/probe.txt" >> "$OUT/summary.txt"
fi
rm -rf "$L"
