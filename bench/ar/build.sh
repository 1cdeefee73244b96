#!/bin/bash
# Builds the AR donor test and bench binaries directly with nvcc/gcc from their own sources
# (independent of the rest of the library). Usage: bench/ar/build.sh OUTDIR [CJSON_PREFIX]
set -e
O=${1:-build-ar}; CJ=${2:-/usr}
mkdir -p "$O"
R=$(cd "$(dirname "$0")/../.." && pwd)
INC="-I$R/include -I$R/src -I$R/tests -I$R/tools -I$CJ/include"
NV="nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -lineinfo $INC"
CC="gcc -std=gnu11 -O2 -Wall -Wno-unused-parameter -DPZ_HAVE_CUDA=1 $INC -I/usr/local/cuda/include"
for f in src/core/status.c src/core/gate.c src/backend/cpu/ref_ops.c src/backend/cpu/cpu_pool.c \
         src/backend/cuda/ar_nccl.c tools/bench_ar.c tools/bench_common.c bench/ar/bench_main.c; do
  $CC -c "$R/$f" -o "$O/$(basename "$f" .c).o" &
done
for f in src/backend/cuda/comm.cu src/backend/cuda/kernels/ar_fused.cu src/backend/cuda/gate_cuda.cu tests/cuda/test_ar.cu; do
  $NV -c "$R/$f" -o "$O/$(basename "$f" .cu).o" &
done
wait
LIB="$O/status.o $O/gate.o $O/comm.o $O/ar_fused.o $O/gate_cuda.o $O/ar_nccl.o"
nvcc -o "$O/test_ar" "$O/test_ar.o" $LIB "$O/ref_ops.o" "$O/cpu_pool.o" -ldl -lpthread -lm
nvcc -o "$O/bench_ar" "$O/bench_main.o" "$O/bench_ar.o" "$O/bench_common.o" $LIB -L"$CJ/lib/x86_64-linux-gnu" -L"$CJ/lib" -lcjson -ldl -lpthread -lm
gcc -std=gnu11 -O2 $INC -o "$O/regate" "$R/bench/ar/regate.c" "$R/src/core/gate.c" -L"$CJ/lib/x86_64-linux-gnu" -lcjson
gcc -std=gnu11 -O2 $INC -o "$O/test_gate" "$R/tests/test_gate.c" "$R/src/core/gate.c" "$R/src/core/status.c" -lm
echo "built $O/test_ar $O/bench_ar $O/test_gate $O/regate"
