#!/usr/bin/env bash
# Fails when ptxas serializes the wgmma instructions of any Hopper GEMM or MLA attention kernel instance (its
# "Potential Performance Loss" note C7520: a runtime branch around the wgmmas, for example).
# That loss is silent in the build log and cost ~8 % on the H200 once (bench/results/gemm_h200_ks.md).
# Usage: wgmma_serialization.sh NVCC SOURCE_DIR ; exit 77 (skipped) without nvcc.
set -u
nvcc=${1:-}
src=${2:-}
[ -n "$nvcc" ] && command -v "$nvcc" >/dev/null 2>&1 || { echo "no nvcc: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
for f in gemm_wgmma.cu gemm_wgmma_streamk.cu mla_attn_wgmma.cu mla_attn_pp.cu; do
  out=$("$nvcc" -gencode arch=compute_90a,code=sm_90a -std=c++17 -O3 --expt-relaxed-constexpr \
        -I"$src/src" -I"$src/include" -c "$src/src/backend/cuda/kernels/$f" -o "$tmp/$f.o" 2>&1)
  st=$?
  if [ $st -ne 0 ]; then echo "FAIL: $f does not compile:"; echo "$out" | head -20; rc=1; continue; fi
  n=$(printf '%s\n' "$out" | grep -c "C7520")
  if [ "$n" -ne 0 ]; then
    echo "FAIL: $f: ptxas serializes the wgmmas of $n kernel instance(s) (C7520):"
    printf '%s\n' "$out" | grep "C7520" | head -5
    rc=1
  else
    echo "ok: $f: no serialized wgmma instance"
  fi
done
exit $rc
