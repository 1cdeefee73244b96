#!/usr/bin/env bash
# Before/after bit-identity of a refactor on the GPU: builds the source tarball OLD (git archive
# of the earlier commit) next to this tree's build, runs the same greedy decode with both
# (Kimi-K2 first LAYERS layers, deterministic split-K: PREZERO_GEMM_SPLITS=2, prezero off and on)
# and compares the printed tokens and the last step's logits byte for byte.
# Usage: OUT=dir bash bench/dev/before_after.sh OLD.tar NEW_BINARY   (cJSON prefix in $CJ)
set -u
OLD=$1; NEW=$2; OUT=${OUT:-/tmp/pz_before_after}; LAYERS=${LAYERS:-4}
mkdir -p "$OUT" /tmp/pz_old_src
tar -xf "$OLD" -C /tmp/pz_old_src
cmake -S /tmp/pz_old_src -B /tmp/pz_old_build -G Ninja -DCMAKE_BUILD_TYPE=Release ${CJ:+-DCMAKE_PREFIX_PATH=$CJ/usr} \
  -DCMAKE_CUDA_ARCHITECTURES=90a > "$OUT/old_build.txt" 2>&1 && cmake --build /tmp/pz_old_build -j16 --target prezero_cli >> "$OUT/old_build.txt" 2>&1 \
  || { echo "old build failed"; tail -20 "$OUT/old_build.txt"; exit 1; }
S="$OUT/before_after.txt"; : > "$S"
for pz in off on; do
  for side in old new; do
    B=$NEW; [ $side = old ] && B=/tmp/pz_old_build/prezero
    PREZERO_GEMM_SPLITS=2 CUDA_VISIBLE_DEVICES=0 $B run --config kimi_k2 --device cuda --layers $LAYERS --batch 8 --steps 16 \
      --context 512 --prezero $pz --logits "$OUT/logits_${side}_$pz.bin" > "$OUT/run_${side}_$pz.txt" 2>&1
    echo "$side prezero $pz rc=$?" >> "$S"
  done
  grep '^step' "$OUT/run_old_$pz.txt" > /tmp/t_old; grep '^step' "$OUT/run_new_$pz.txt" > /tmp/t_new
  if cmp -s /tmp/t_old /tmp/t_new && [ -s /tmp/t_old ]; then echo "prezero $pz: tokens identical old vs new ($(wc -l < /tmp/t_old) steps)" >> "$S"; else echo "prezero $pz: tokens DIFFER old vs new" >> "$S"; fi
  if cmp -s "$OUT/logits_old_$pz.bin" "$OUT/logits_new_$pz.bin"; then echo "prezero $pz: logits bit-identical old vs new ($(stat -c %s "$OUT/logits_new_$pz.bin") bytes)" >> "$S"; else echo "prezero $pz: logits DIFFER old vs new" >> "$S"; fi
done
cmp -s "$OUT/logits_new_off.bin" "$OUT/logits_new_on.bin" && echo "new: ON vs OFF logits bit-identical" >> "$S" || echo "new: ON vs OFF logits DIFFER" >> "$S"
cat "$S"
