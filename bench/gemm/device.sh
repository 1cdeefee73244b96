#!/usr/bin/env bash
# GPU-machine script of the split-K GEMM family: build (nvcc/gcc, own files only), compute-sanitizer
# on the test (quick mode), the full test, `bench gemm`, and an ncu look at the kernels.
# Usage (repo root, on the GPU machine): OUT=/some/dir bash bench/gemm/device.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pz_gemm_out}
mkdir -p "$OUT"
B=/tmp/pz_gemm_build
mkdir -p $B
. bench/device_env.sh
INC=$PZ_INC
LIBS="$PZ_CUDA_LIB -lcudart -lcublas $PZ_CJSON_LIB -lm"
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
  nvcc --version | tail -1
  nvcc $PZ_NVARCH -O3 -lineinfo -Xptxas -v $INC \
    -c src/backend/cuda/kernels/gemm_splitk.cu -o $B/k.o 2>&1 | grep -E "error|registers|spill" &
  for f in src/backend/cuda/gemm.c src/backend/cuda/tuner.c src/core/status.c tools/bench_gemm.c \
           tools/bench_common.c bench/gemm/bench_main.c tests/cuda/test_gemm.c; do
    gcc -std=c11 -O2 -Wall -DPZ_HAVE_CUDA=1 $INC -c $f -o $B/$(basename $f .c).o &
  done
  wait
  g++ -o $B/test_gemm $B/test_gemm.o $B/gemm.o $B/tuner.o $B/k.o $B/status.o $LIBS
  g++ -o $B/bench_gemm $B/bench_main.o $B/bench_gemm.o $B/bench_common.o $B/gemm.o $B/tuner.o $B/k.o $B/status.o $LIBS
  ls -la $B/test_gemm $B/bench_gemm
} > $OUT/build.txt 2>&1
echo "== build"; tail -3 $OUT/build.txt
[ -x $B/test_gemm ] || { cat $OUT/build.txt; exit 1; }
[ "${PZ_GEMM_BUILD_ONLY:-0}" = 1 ] && exit 0

echo "== compute-sanitizer memcheck (quick test)"
PZ_TEST_QUICK=1 PZ_TEST_REPLAYS=20 timeout 110 compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/test_gemm > $OUT/sanitizer.txt 2>&1; echo "memcheck rc=$?"; tail -4 $OUT/sanitizer.txt

echo "== test"
( time timeout 60 $B/test_gemm ) > $OUT/test.txt 2>&1; echo "test rc=$?"; tail -8 $OUT/test.txt

echo "== bench"
mkdir -p $OUT/cache
export PREZERO_CACHE_DIR=$OUT/cache
( time timeout 220 $B/bench_gemm --json $OUT/gemm_h200.json --md $OUT/gemm_h200.md ) > $OUT/bench.txt 2>&1
echo "bench rc=$?"

echo "== ncu (flavour-1 kernels as tuned, --clock-control none)"
for m in 1 128; do
  timeout 45 ncu --clock-control none -k regex:gemm_s -c 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats $B/bench_gemm --no-tune --reps 3 --m $m --only Kimi-K2/tp4/qkv_a
  echo "ncu m=$m rc=$?"
done > $OUT/ncu.txt 2>&1
grep -E "ncu m=|gemm_splitk_kernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per" $OUT/ncu.txt | head -40; grep -E "gemm_splitk_kernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per" $OUT/ncu.txt | head -40
echo "== bench summary"; cut -c1-220 $OUT/bench.txt | tail -75
