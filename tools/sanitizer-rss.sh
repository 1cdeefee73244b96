#!/usr/bin/env bash
# Host memory of one CUDA test under a compute-sanitizer tool: runs it (quick mode, as the sweep does)
# for at most T seconds and samples the test process's resident set every 3 s; prints the peak and the
# log's last lines. Used to find what made racecheck's host memory grow until the OOM killer ended a test
# (bench/results/sweep_h200.txt). Run on a GPU machine after `tools/device-check.sh build`.
# Usage: [SAN_TOOL=racecheck] [SAN_ARGS="--kernel-name-exclude kns=..."] tools/sanitizer-rss.sh TEST T [VAR=value ...]
#   e.g. tools/sanitizer-rss.sh test_ar 75 PREZERO_GATE_CALIBRATE=0
# Writes $OUT/rss_<test>_<pid>.txt (seconds, MiB) and $OUT/san_<test>_<pid>.log; OUT defaults to /tmp.
set -u
t=${1:?test name}; T=${2:?seconds}; shift 2
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
exe=$(find build-dev -name "$t" -type f -executable | head -1)
[ -n "$exe" ] || { echo "sanitizer-rss: $t not found under build-dev; run tools/device-check.sh build first" >&2; exit 2; }
log=$OUT/san_${t}_$$.log rss=$OUT/rss_${t}_$$.txt
(env "$@" PZ_TEST_QUICK=1 PZ_TEST_SMALL=1 PZ_TEST_TIMEOUT_SCALE=20 timeout -k 15 "$T" \
  compute-sanitizer --tool "${SAN_TOOL:-racecheck}" ${SAN_ARGS:-} "$exe" > "$log" 2>&1) &
pid=$!
peak=0 t0=$(date +%s)
while kill -0 $pid 2>/dev/null; do
  # the largest resident set among this run's descendants (the test under the sanitizer), so the
  # same test run by a sweep at the same time is not counted
  r=0 kids=$pid all=""
  while [ -n "$kids" ]; do
    all="$all $kids"
    kids=$(for k in $kids; do pgrep -P "$k"; done 2>/dev/null | tr '\n' ' ' | sed 's/ *$//')
  done
  for p in $all; do
    v=$(ps -o rss= -p "$p" 2>/dev/null | tr -d ' '); [ -n "$v" ] && [ "$v" -gt "$r" ] && r=$v
  done
  [ "$r" -gt "$peak" ] && peak=$r
  echo "$(( $(date +%s) - t0 )) $((r / 1024))" >> "$rss"
  sleep 3
done
wait $pid; rc=$?
echo "$t $* [${SAN_TOOL:-racecheck} ${SAN_ARGS:-}]: rc=$rc peak_rss=$((peak / 1024)) MiB after $(( $(date +%s) - t0 )) s"
tail -3 "$log"
