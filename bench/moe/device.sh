#!/usr/bin/env bash
# GPU-machine script of the CUDA MoE: build (nvcc/gcc, own files + core/CPU references only),
# compute-sanitizer memcheck on the test's small shapes, the full test, `bench moe`.
# Usage (repo root, on the GPU machine): OUT=/some/dir bash bench/moe/device.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pz_moe_out}
mkdir -p "$OUT"
B=/tmp/pz_moe_build
mkdir -p $B
. bench/device_env.sh
INC=$PZ_INC
LIBS="$PZ_CUDA_LIB -lcudart $PZ_CJSON_LIB -lm -lpthread"
NV="nvcc $PZ_NVARCH -O3 -std=c++17 -lineinfo -Xptxas -v $INC"
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
  nvcc --version | tail -1
  $NV -c src/backend/cuda/kernels/moe_route.cu -o $B/moe_route.o 2>&1 | grep -E "error|registers|spill" &
  $NV -c src/backend/cuda/kernels/moe_experts.cu -o $B/moe_experts.o 2>&1 | grep -E "error|registers|spill" &
  $NV -c src/backend/cuda/kernels/moe_w4a16.cu -o $B/moe_w4a16.o 2>&1 | grep -E "error|registers|spill" &
  $NV -c src/backend/cuda/kernels/moe_w8a16.cu -o $B/moe_w8a16.o 2>&1 | grep -E "error|registers|spill" &
  $NV -c bench/dev/dev_helpers.cu -o $B/dev_helpers.o 2>&1 | grep -E "error" & # fills + stream read (bench/dev)
  for f in src/core/status.c src/backend/cuda/cuda_util.c src/backend/cpu/ref_ops.c src/backend/cpu/ref_moe.c src/backend/cpu/cpu_pool.c \
           tests/cuda/test_moe.c tools/bench_moe.c tools/bench_common.c bench/moe/bench_main.c; do
    gcc -std=c11 -O2 -Wall -pthread -DPZ_HAVE_CUDA=1 $INC -c $f -o $B/$(basename $f .c).o &
  done
  wait
  K="$B/moe_route.o $B/moe_experts.o $B/moe_w4a16.o $B/moe_w8a16.o $B/dev_helpers.o $B/status.o $B/cuda_util.o"
  g++ -o $B/test_moe $B/test_moe.o $B/ref_ops.o $B/ref_moe.o $B/cpu_pool.o $K $LIBS
  g++ -o $B/bench_moe $B/bench_main.o $B/bench_moe.o $B/bench_common.o $K $LIBS
  ls -la $B/test_moe $B/bench_moe
} > $OUT/build.txt 2>&1
echo "== build"; tail -12 $OUT/build.txt
[ -x $B/test_moe ] && [ -x $B/bench_moe ] || { cat $OUT/build.txt; exit 1; }

echo "== test"
( time timeout 75 $B/test_moe ) > $OUT/test.txt 2>&1; echo "test rc=$?"; tail -40 $OUT/test.txt

echo "== bench"
( time timeout 70 $B/bench_moe --json $OUT/moe_h200.json --md $OUT/moe_h200.md ) > $OUT/bench.txt 2>&1
echo "bench rc=$?"; cat $OUT/bench.txt

echo "== bench --quant int4 (Kimi-K2.5 INT4 W4A16 experts; bf16 timed in the same run)"
( time timeout 240 $B/bench_moe --quant int4 --json $OUT/moe_h200_int4.json --md $OUT/moe_h200_int4.md ) > $OUT/bench_int4.txt 2>&1
echo "bench int4 rc=$?"; cat $OUT/bench_int4.txt

echo "== compute-sanitizer memcheck (quick test)"
PZ_TEST_QUICK=1 PZ_TEST_SMALL=1 timeout ${SAN_TIMEOUT:-60} compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_moe > $OUT/sanitizer.txt 2>&1; echo "memcheck rc=$?"; tail -6 $OUT/sanitizer.txt

echo "== bench, PREZERO_MOE_PERSISTENT=0 (one CTA per possible item), TP 4"
PREZERO_MOE_PERSISTENT=0 timeout 40 $B/bench_moe --tp 4 --md $OUT/moe_h200_nonpersistent.md > $OUT/bench_nonpersistent.txt 2>&1
echo "rc=$?"; cat $OUT/bench_nonpersistent.txt

echo "== ncu: gate/up and down kernels at TP 4, m = 16 (--clock-control none)"
timeout 60 ncu --clock-control none -k regex:moe_mm_kernel -c 2 --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section Occupancy --section LaunchStats $B/bench_moe --tp 4 --m 16 --reps 3 > $OUT/ncu.txt 2>&1
echo "ncu rc=$?"; grep -E "moe_mm_kernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Grid Size" $OUT/ncu.txt | head -24
