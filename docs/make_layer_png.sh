#!/usr/bin/env bash
# Renders docs/moe_layer.png: one MoE layer (layer 1 of kimi_k2 at TP 4, batch 4) before and
# after the prezero pass, from `prezero graph --dot`, side by side. Needs Graphviz's `dot`.
# Usage, from the repository root after the build: bash docs/make_layer_png.sh [build dir]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$B/prezero" graph --config kimi_k2 --tp 4 --layers 2 --prezero off --dot "$T/off.dot" >/dev/null
"$B/prezero" graph --config kimi_k2 --tp 4 --layers 2 --prezero on --dot "$T/on.dot" >/dev/null
# Keeps the nodes named layers.1.* and the edges between them, ids prefixed so that both copies
# live in one graph; each copy becomes a cluster.
layer() { # layer FILE PREFIX TITLE
  awk -v p="$2" -v title="$3" '
    /^  n[0-9]+ \[label="layers\.1\./ { id = $1; keep[id] = 1; sub(/^  n/, "  " p "n"); print; next }
    /^  n[0-9]+ -> n[0-9]+/ { if (($1 in keep) && ($3 in keep)) { sub(/^  n/, "  " p "n"); sub(/-> n/, "-> " p "n"); print } }
    BEGIN { print "subgraph cluster_" p " { label=\"" title "\"; fontname=sans; fontsize=18;" }
    END { print "}" }' "$1"
}
{
  echo 'digraph layer { rankdir=TB; newrank=true; node [shape=box, fontname=monospace, fontsize=11]; edge [fontname=monospace, fontsize=9];'
  layer "$T/off.dot" off_ "before: prezero off (each split-K GEMM zeroes its own output)"
  layer "$T/on.dot" on_ "after: prezero on (the layernorm donors zero the GEMM outputs; dashed: zero_fill slices)"
  echo '}'
} > "$T/layer.dot"
dot -Tpng -Gdpi=72 "$T/layer.dot" -o docs/moe_layer.png
ls -l docs/moe_layer.png
