#!/bin/bash
# AR donor on the device machine: build (nvcc, sm_90a), compute-sanitizer on the TP=1 test,
# the full test (TP=1 + TP=2) with default clusters, with clusters everywhere and with none,
# the gate test, and `bench ar` at TP=1 and TP=2 (plus TP=1 without clusters, TP=2 with).
# Run from the repository root with $OUT set; carry .deps (cJSON .debs). BENCH_ARGS adds
# bench options (e.g. --sweep). Results land in $OUT (8 files).
set -o pipefail
export NCCL_NVLS_ENABLE=0
. "$(dirname "$0")/../device_env.sh"
pz_add_nccl_path
B=/tmp/build-ar
T=$OUT/ar_test.log
bench/ar/build.sh $B $CJ/usr > /tmp/ar_build.log 2>&1 || { tail -30 /tmp/ar_build.log; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $T 2>&1
nvidia-smi topo -m >> $T 2>&1
echo "NCCL_DIR=$NCCL_DIR" >> $T
$B/test_gate >> $T 2>&1; echo "test_gate rc=$?" | tee -a $T
PZ_TEST_QUICK=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_ar > $OUT/ar_sanitizer.log 2>&1
echo "sanitizer(test_ar TP=1 quick) rc=$?" | tee -a $T; tail -3 $OUT/ar_sanitizer.log
timeout 120 $B/test_ar >> $T 2>&1; echo "test_ar rc=$?" | tee -a $T
PREZERO_AR_CLUSTER=1 timeout 120 $B/test_ar >> $T 2>&1; echo "test_ar PREZERO_AR_CLUSTER=1 rc=$?" | tee -a $T
PREZERO_AR_CLUSTER=0 timeout 120 $B/test_ar >> $T 2>&1; echo "test_ar PREZERO_AR_CLUSTER=0 rc=$?" | tee -a $T
grep -v "^$" $T | tail -14
timeout 60 $B/bench_ar --tp 1 --json $OUT/ar_h200_tp1.json --md $OUT/ar_h200_tp1.md ${BENCH_ARGS} 2>>$T >/dev/null
echo "bench tp1 rc=$?"
timeout 90 $B/bench_ar --tp 2 --json $OUT/ar_h200x2_tp2.json --md $OUT/ar_h200x2_tp2.md ${BENCH_ARGS} 2>>$T >/dev/null
echo "bench tp2 rc=$?"
PREZERO_AR_CLUSTER=0 timeout 60 $B/bench_ar --tp 1 --md $OUT/ar_h200_tp1_nocluster.md 2>>$T >/dev/null
echo "bench tp1 no-cluster rc=$?"
PREZERO_AR_CLUSTER=1 timeout 90 $B/bench_ar --tp 2 --md $OUT/ar_h200x2_tp2_cluster.md 2>>$T >/dev/null
echo "bench tp2 cluster rc=$?"; tail -3 $T
for f in ar_h200x2_tp2 ar_h200x2_tp2_cluster ar_h200_tp1; do echo "== $f"; grep "^| [0-9]" $OUT/$f.md | cut -d'|' -f2-11; done
