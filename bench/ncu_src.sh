#!/usr/bin/env bash
# Source-level ncu evidence: per-SASS-instruction warp stall samples of one launch of one kernel, with the
# speed-of-light, compute-workload (pipe utilisation) and warp-state sections. For each case the details page
# is printed, and the source page (SASS lines with their stall
# samples) is written as gzipped CSV (<name>_sass.csv.gz) for reading off the machine. Every case's files are packed
# into one archive, $OUT/ncu_src_files.tar (few files come back from the GPU machine); the reports stay in
# ${PZ_NCU_REP:-/tmp/pz_ncu_rep}.
# Usage, on the GPU machine after a build into build-dev (tools/device-check.sh build):
#   OUT=/dir bash bench/ncu_src.sh
# PZ_NCU_SRC_CASES="name;kernel regex;launches to skip;env;prezero arguments|..." overrides the cases, PZ_NCU_SECTIONS
# the ncu sections (e.g. add --section MemoryWorkloadAnalysis_Tables for the L1 / L2 traffic by operation).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/pz_ncu_src}; R=${PZ_NCU_REP:-/tmp/pz_ncu_rep}; F=$R/files; rm -rf "$F"; mkdir -p "$OUT" "$R" "$F"
P=build-dev/prezero
S=${PZ_NCU_SECTIONS:-"--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy"}
DEF="attn4_tp1_m128;mla_attn4_kernel;1;;bench attn --paged --tp 1 --m 128 --reps 2"
DEF="$DEF|attn4_tp1_m16;mla_attn4_kernel;1;;bench attn --paged --tp 1 --m 16 --reps 2"
DEF="$DEF|oproj_m64_s2w1;gemm_wgmma;2;PREZERO_BENCH_CFG=2,1,5,3;bench gemm --no-tune --reps 1 --m 64 --only Kimi-K2/tp1/o_proj"
DEF="$DEF|qb_m64_s1w1;gemm_wgmma;2;PREZERO_BENCH_CFG=1,1,5,3;bench gemm --no-tune --reps 1 --m 64 --only Kimi-K2/tp1/q_b"
IFS='|' read -ra cases <<< "${PZ_NCU_SRC_CASES:-$DEF}"
for c in "${cases[@]}"; do
  IFS=';' read -r name kern skip envs args <<< "$c"
  echo "== $name: kernel $kern, skip $skip, env [$envs], prezero $args"
  rm -f "$R/$name.ncu-rep"
  env $envs timeout 240 ncu --clock-control none -k regex:"$kern" -s "$skip" -c 1 $S --import-source no \
    -o "$R/$name" $P $args > "$F/${name}_run.txt" 2>&1 || { echo "ncu failed: $(tail -3 "$F/${name}_run.txt")"; continue; }
  ncu -i "$R/$name.ncu-rep" --page details 2>&1 | sed 's/  */ /g' | grep -vE "^ *-+ *$" | head -260
  ncu -i "$R/$name.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip > "$F/${name}_sass.csv.gz"
  # the 25 SASS lines with the most stall samples, as % of the launch's samples (every CSV field is quoted)
  zcat "$F/${name}_sass.csv.gz" | tail -n +3 | sed 's/^"//; s/"$//; s/","/\t/g' |
    awk -F'\t' '{n += $3; l[NR] = $3 "\t" $1 "\t" $2} END {for (i = 1; i <= NR; i++) {split(l[i], f, "\t");
      if (n > 0) printf "%6.2f%%\t%s\t%s\n", 100 * f[1] / n, substr(f[2], length(f[2]) - 4), f[3]}; print n " samples" > "/dev/stderr"}' |
    sort -t"$(printf '\t')" -k1,1nr | head -25
done
tar -cf "$OUT/ncu_src_files.tar" -C "$F" .
