#!/usr/bin/env bash
# Classifies the reports in one compute-sanitizer log against the known vendor hazards.
# Usage: tools/sanitizer-classify.sh TOOL LOG [KNOWN]   (KNOWN default: tools/sanitizer-known.txt)
#   TOOL   memcheck | racecheck | synccheck | initcheck (the entries of KNOWN that apply)
# A report is a top-level line of the log ("========= " + a non-space character) with its indented
# lines ("=========     ..."), ended by a bare "=========" or the next top-level line. Not reports:
# the banner (COMPUTE-SANITIZER), the ERROR / RACECHECK / LEAK SUMMARY lines and "Target
# application returned an error" (the test's own exit code says that). A report is known-vendor
# when its device-side lines (its first line and its indented lines before "Saved host
# backtrace") match a pattern of TOOL or "all" in KNOWN; any other report is unknown. A summary
# that counts errors when no report could be read counts as one unknown report (a format this
# script does not read must not pass).
# Prints one line:  reports=N known_vendor=K unknown=U [first_unknown: <its first line>]
# Exit: 0 when U = 0, 1 when U > 0, 2 on a usage error or a malformed KNOWN (one line on stderr).
set -u
tool=${1:-}
log=${2:-}
known=${3:-$(dirname "$0")/sanitizer-known.txt}
case $tool in
  memcheck|racecheck|synccheck|initcheck) ;;
  *) echo "sanitizer-classify: TOOL '$tool' is not memcheck, racecheck, synccheck or initcheck; usage: $0 TOOL LOG [KNOWN]" >&2; exit 2 ;;
esac
[ -r "$log" ] || { echo "sanitizer-classify: cannot read the log '$log'; give the compute-sanitizer output file" >&2; exit 2; }
[ -r "$known" ] || { echo "sanitizer-classify: cannot read the known-hazard list '$known'; see tools/sanitizer-known.txt" >&2; exit 2; }

awk -v tool="$tool" -v known="$known" '
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
function flush() {
  if (!inrep) return
  n++
  hit = 0
  for (i = 0; i < np; i++) if (dev ~ pat[i]) { hit = 1; break }
  if (hit) k++
  else { u++; if (first == "") first = head }
  inrep = 0; dev = ""; inbt = 0
}
BEGIN {
  np = 0; ln = 0
  while ((getline line < known) > 0) {
    ln++
    body = line
    c = index(body, "#")
    note = c ? trim(substr(body, c + 1)) : ""
    if (c) body = substr(body, 1, c - 1)
    body = trim(body)
    if (body == "") continue
    nf = split(body, f, /[ \t]+/)
    if (nf != 2 || f[1] !~ /^(memcheck|racecheck|synccheck|initcheck|all)$/ || note == "") {
      printf "sanitizer-classify: %s line %d is not \"TOOL PATTERN # what it is; where seen\" (TOOL: memcheck, racecheck, synccheck, initcheck or all); fix that line\n", known, ln > "/dev/stderr"
      bad = 1; exit 2
    }
    if (f[1] == tool || f[1] == "all") pat[np++] = f[2]
  }
  close(known)
  n = k = u = 0; summ = 0; inrep = 0; first = ""
}
/^=========$/ || /^========= *$/ { flush(); next }
/^========= / {
  body = substr($0, 11)
  if (body ~ /^[^ ]/) {  # a top-level line
    flush()
    if (body ~ /^COMPUTE-SANITIZER/ || body ~ /^Target application returned an error/) next
    if (body ~ /^(ERROR|RACECHECK|LEAK) SUMMARY:/) {
      if (body !~ /^LEAK/ && match(body, /: [0-9]+/)) summ += substr(body, RSTART + 2, RLENGTH - 2) + 0
      next
    }
    inrep = 1; head = body; dev = body; inbt = 0
    next
  }
  if (inrep) {
    if (body ~ /Saved host backtrace|Host Frame:/) inbt = 1
    if (!inbt) dev = dev "\n" body
  }
  next
}
END {
  if (bad) exit 2
  flush()
  if (n == 0 && summ > 0) { n = 1; u = 1; first = "the summary counts " summ " error(s) but no report could be read" }
  printf "reports=%d known_vendor=%d unknown=%d", n, k, u
  if (u) printf " first_unknown: %s", substr(first, 1, 200)
  printf "\n"
  exit u ? 1 : 0
}' "$log"
