#!/usr/bin/env bash
# Builds and runs the CPU emulation check of the MLA kernels (emu_check.cpp): extracts the
# kernels of src/backend/cuda/kernels/mla_kernels.cu as host code (asm helpers replaced by
# emu.h), links the CPU references. Usage (repo root): bash bench/attn/emu/run.sh [quick]
set -eu
cd "$(dirname "$0")/../../.."
B=${B:-/tmp/pz_mla_emu}
mkdir -p $B
python3 - "$B/gen_kernels.inc" <<'PY'
import re, sys
s = open("src/backend/cuda/kernels/mla_kernels.cu").read()
s = s[s.index("namespace {"):s.index("} // namespace") + len("} // namespace")]
a = s.index("__device__ __forceinline__ uint32_t smem_u32")
b = s.index("constexpr int BN = PZ_MLA_BN;")
s = s[:a] + s[b:]
s = re.sub(r"extern __shared__ (\w+) (\w+)\[\];", r"\1 *\2 = (\1 *)emu_dyn_smem();", s)
s = s.replace("__shared__", "static")
s = re.sub(r"^[ \t]*#pragma unroll[^\n]*", "", s, flags=re.M)
open(sys.argv[1], "w").write(s)
PY
INC="-I include -I src -I $B -I bench/attn/emu -I /usr/local/cuda/include"
for f in src/backend/cpu/ref_ops.c src/backend/cpu/ref_mla.c src/core/pool.c src/core/status.c src/core/rope.c src/core/kv_sched.c src/core/options.c; do
  gcc -std=gnu11 -O2 $INC -c $f -o $B/$(basename $f .c).o
done
g++ -std=c++17 -O1 -w $INC -c bench/attn/emu/emu_check.cpp -o $B/emu_check.o
g++ -o $B/emu_check $B/emu_check.o $B/ref_ops.o $B/ref_mla.o $B/pool.o $B/status.o $B/rope.o $B/kv_sched.o $B/options.o -lpthread -lm
time $B/emu_check "$@"
