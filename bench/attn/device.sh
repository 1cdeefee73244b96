#!/usr/bin/env bash
# GPU-machine script of the MLA decode op and the dense ops: build (nvcc/gcc, only the files they
# need), compute-sanitizer on the tests (quick mode), the full tests, `bench attn`, an ncu look.
# Usage (repo root, on the GPU machine; .deps carried for cJSON): OUT=/some/dir bash bench/attn/device.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pz_attn_out}
mkdir -p "$OUT"
B=/tmp/pz_attn_build
mkdir -p $B/o
. bench/device_env.sh
INC=$PZ_INC
LIBS="$PZ_CUDA_LIB -lcudart -lcublas $PZ_CJSON_LIB -lpthread -lm"
NV="nvcc $PZ_NVARCH -O3 -std=c++17 -lineinfo --expt-relaxed-constexpr"
{
  nvidia-smi -L
  nvcc --version | tail -1
  $NV -Xptxas -v $INC -c src/backend/cuda/kernels/mla_kernels.cu -o $B/o/mla_kernels.o 2>&1 | grep -E "error|mla_attn|registers|spill" &
  $NV $INC -c src/backend/cuda/kernels/dense_ops.cu -o $B/o/dense_ops.o &
  $NV $INC -c src/backend/cuda/kernels/gemm_splitk.cu -o $B/o/gemm_splitk.o &
  for f in src/core/*.c src/passes/*.c src/backend/cpu/*.c src/backend/cuda/gemm.c src/backend/cuda/tuner.c \
           src/backend/cuda/mla.c; do
    gcc -std=gnu11 -O2 -DPZ_HAVE_CUDA=1 $INC -c $f -o $B/o/$(basename $f .c).o || echo "compile failed: $f" &
  done
  wait
  rm -f $B/libpz.a
  ar rcs $B/libpz.a $B/o/*.o
  for t in tests/cuda/test_mla.c tests/cuda/test_dense_ops.c tools/bench_attn.c tools/bench_common.c bench/attn/bench_main.c; do
    gcc -std=gnu11 -O2 -Wall -DPZ_HAVE_CUDA=1 $INC -c $t -o $B/$(basename $t .c).o
  done
  g++ -o $B/test_mla $B/test_mla.o $B/libpz.a $LIBS
  g++ -o $B/test_dense_ops $B/test_dense_ops.o $B/libpz.a $LIBS
  g++ -o $B/bench_attn $B/bench_main.o $B/bench_attn.o $B/bench_common.o $B/libpz.a $LIBS
  ls -la $B/test_mla $B/test_dense_ops $B/bench_attn
} > $OUT/build.txt 2>&1
echo "== build"; grep -E "error|failed|mla_attn_kernelILi[124]ELi16|registers" $OUT/build.txt | head -20; tail -3 $OUT/build.txt

echo "== test_dense_ops"
( time timeout 60 $B/test_dense_ops ) > $OUT/test_dense_ops.txt 2>&1; echo "rc=$?"; tail -14 $OUT/test_dense_ops.txt
echo "== test_mla"
( time timeout 90 $B/test_mla ) > $OUT/test_mla.txt 2>&1; echo "rc=$?"; tail -45 $OUT/test_mla.txt

echo "== bench attn"
( time timeout 120 $B/bench_attn --json $OUT/attn_h200.json --md $OUT/attn_h200.md ) > $OUT/bench.txt 2>&1
echo "rc=$?"; cat $OUT/bench.txt
echo "== bench attn, version-1 attention kernel (A/B in the same run)"
( PREZERO_MLA_ATTN=1 timeout 60 $B/bench_attn --tp 4,1 --m 4,32,128 --json $OUT/attn_h200_kernel_v1.json ) > $OUT/bench_v1.txt 2>&1
echo "rc=$?"; cat $OUT/bench_v1.txt

echo "== compute-sanitizer (quick tests)"
PZ_TEST_QUICK=1 timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_dense_ops > $OUT/san_dense.txt 2>&1
echo "memcheck dense rc=$?"; tail -3 $OUT/san_dense.txt
PZ_TEST_QUICK=1 timeout 80 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test_mla > $OUT/san_mla.txt 2>&1
echo "memcheck mla rc=$?"; grep -E "ERROR|Invalid|failed|CHECK" $OUT/san_mla.txt | head -10; tail -3 $OUT/san_mla.txt

if [ "${PZ_NCU:-0}" = 1 ]; then
  echo "== ncu (attention kernel, TP4 m=32 and TP1 m=32)"
  for tp in 4 1; do
    timeout 60 ncu --clock-control none -k regex:mla_attn -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section Occupancy --section WarpStateStats $B/bench_attn --tp $tp --m 32 --reps 3
  done > $OUT/ncu.txt 2>&1
  grep -E "mla_attn_kernel|Duration|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers" $OUT/ncu.txt | head -30
fi
