#!/usr/bin/env bash
# On a GPU machine: install, run the MQA GPU tests (paged ones also with 2 stages), sanitizers on small paged
# cases, the mqa bench, a paged stage sweep and one ncu profile of the paged kernel. Usage: tools/mqa_gpu_run.sh OUT
set -u
OUT=${1:?usage: tools/mqa_gpu_run.sh OUT_DIR}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CXX=${CXX:-/usr/bin/g++} DG_JIT_CACHE_DIR=${DG_JIT_CACHE_DIR:-/tmp/dgc}
WHEELHOUSE=${WHEELHOUSE:-.whl} ./install.sh > "$OUT/install.log" 2>&1 || { echo install failed; tail -30 "$OUT/install.log"; exit 1; }
ROOT=$PWD
cd "$ROOT/tests"
timeout 300 python3 -m pytest -q -m gpu test_mqa_logits.py > "$OUT/pytest.log" 2>&1; echo "pytest rc=$?" | tee -a "$OUT/summary.txt"
DG_PAGED_MQA_STAGES=2 timeout 120 python3 -m pytest -q -m gpu -k "paged_against or paged_any or paged_unclean or paged_clean" \
    test_mqa_logits.py > "$OUT/pytest-stages2.log" 2>&1; echo "pytest stages=2 rc=$?" | tee -a "$OUT/summary.txt"
cd /tmp
timeout 200 python3 -m deep_gemm.bench --suite mqa --no-baselines --num-tests 10 --json "$OUT/mqa.json" > "$OUT/mqa.log" 2>&1
echo "bench rc=$?" | tee -a "$OUT/summary.txt"
# prefill A/B: the math warpgroups issuing independently (DG_MQA_LOGITS_PING_PONG=0) against ping-pong (above)
DG_MQA_LOGITS_PING_PONG=0 timeout 120 python3 -m deep_gemm.bench --suite mqa --no-baselines --num-tests 10 --shapes \
    2048x8192 2048x65536 8192x8192 8192x65536 2048x8192-cp 2048x65536-cp 8192x8192-cp 8192x65536-cp \
    --json "$OUT/mqa-no-pingpong.json" > "$OUT/mqa-no-pingpong.log" 2>&1
echo "bench no ping-pong rc=$?" | tee -a "$OUT/summary.txt"
cd "$ROOT/tests"
for tool in memcheck racecheck synccheck; do
    timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m pytest -q -x \
        "test_mqa_logits.py::test_paged_against_float64[b16-t2-h32-d64-bkv64-ctx3000]" \
        "test_mqa_logits.py::test_paged_against_float64[b16-t4-h32-d128-bkv64-ctx3000]" \
        "test_mqa_logits.py::test_paged_metadata_cuda_kernel_graph_replay" \
        "test_mqa_logits.py::test_small_shapes_against_references[causal-64-128]" \
        "test_mqa_logits.py::test_small_shapes_against_references[random-16-64]" > "$OUT/sanitizer-$tool.txt" 2>&1
    echo "sanitizer $tool rc=$?" | tee -a "$OUT/summary.txt"
done
cd /tmp
timeout 150 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section Occupancy -k regex:sm90_fp8_paged_mqa_logits_kernel -s 1 -c 1 \
    python3 -m deep_gemm.bench --suite mqa --shapes paged:64x2x8192 --no-baselines --num-tests 1 --num-warmups 0 \
    > "$OUT/ncu.txt" 2>&1
echo "ncu rc=$?" | tee -a "$OUT/summary.txt"
# prefill: where a causal 2048 x 8192 CTA spends its cycles (stall reasons per SASS line in the source page)
timeout 150 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section ComputeWorkloadAnalysis --section SourceCounters -k regex:sm90_fp8_mqa_logits_kernel -s 1 -c 1 \
    python3 -m deep_gemm.bench --suite mqa --shapes 2048x8192x64x128-causal --no-baselines --num-tests 1 \
    --num-warmups 0 > "$OUT/ncu-prefill.txt" 2>&1
echo "ncu prefill rc=$?" | tee -a "$OUT/summary.txt"
for s in ${DG_SWEEP_STAGES:-8 32}; do
    DG_PAGED_MQA_STAGES=$s timeout 60 python3 -m deep_gemm.bench --suite mqa --shapes paged:64x2x8192 paged:64x1x65536 \
        paged:256x2x65536 --no-baselines --num-tests 10 > "$OUT/mqa-stages$s.log" 2>&1
    echo "sweep stages=$s rc=$?" | tee -a "$OUT/summary.txt"
done
