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
def body(path):  # the file's anonymous namespace
    t = open(path).read()
    return t[t.index("namespace {"):t.index("} // namespace") + len("} // namespace")]
# the helpers both attention versions share (mla_attn_common.cuh), minus its asm bf16 packing (emu.h has it)
c = body("src/backend/cuda/kernels/mla_attn_common.cuh")
a = c.index("/* Two floats as bf16")
c = c[:a] + c[c.index("/* Warp sum and maximum"):]
s = body("src/backend/cuda/kernels/mla_kernels.cu")
a = s.index("__device__ __forceinline__ uint32_t smem_u32")
b = s.index("/* cp.async stages:")
s = '#include "backend/cuda/kernels/pad_rows.cuh"\n' + c + "\n" + s[:a] + s[b:]
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
