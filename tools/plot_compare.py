#!/usr/bin/env python3
"""Plots of a `prezero compare` run (matplotlib): throughput.png (output tokens/s per GPU vs
concurrency, ON and OFF) and components.png (per-layer kernel-time delta ON - OFF per component,
n/f bars hatched). Usage: python3 tools/plot_compare.py DIR/compare.json [OUT_DIR]"""
import json
import os
import sys

COMPS = ["qkv_a", "q_b", "gate", "o_proj", "sh_gu", "gemm_subtotal", "donor"]
LABELS = ["qkv_a", "q_b", "gate", "o_proj", "sh_gu (shared experts' gate | up)", "GEMM subtotal", "donor fill cost"]


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) >= 2 else 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_compare: matplotlib is not installed; pip install matplotlib, or run 'gnuplot plots.gp' "
              "in the compare output folder", file=sys.stderr)
        return 1
    path = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(path))
    try:
        with open(path) as f:
            r = json.load(f)
        pts = r["points"]
    except (OSError, ValueError, KeyError) as e:
        print(f"plot_compare: cannot read a compare.json from {path}: {e}; give the file 'prezero compare' wrote",
              file=sys.stderr)
        return 1
    title = f"{r.get('model', '?')} TP {r.get('tp', '?')}, {r.get('layers', '?')} layers, {r.get('device', '')}"
    conc = [p["conc"] for p in pts]

    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(conc, [p["tput_on"] for p in pts], "o-", label="prezero ON")
    ax.plot(conc, [p["tput_off"] for p in pts], "s--", label="prezero OFF")
    ax.set_xscale("log", base=2)
    ax.set_xticks(conc, [str(c) for c in conc])
    ax.set_xlabel("concurrency (batch)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput.png"), dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / len(COMPS)
    for k, (c, lab) in enumerate(zip(COMPS, LABELS)):
        xs, ys, nf = [], [], []
        for i, p in enumerate(pts):
            comp = p.get("components_us_per_layer", {}).get(c, {})
            on, off = comp.get("on", -1), comp.get("off", -1)
            if not p.get("profiled") or on < 0 or off < 0:
                continue
            xs.append(i + (k - len(COMPS) / 2 + 0.5) * width)
            ys.append(on - off)
            nf.append(comp.get("fired") == "n/f")
        bars = ax.bar(xs, ys, width, label=lab)
        for b, n in zip(bars, nf):
            if n:
                b.set_hatch("//")
                b.set_alpha(0.4)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(conc)), [str(c) for c in conc])
    ax.set_xlabel("concurrency (batch)")
    ax.set_ylabel("ON - OFF, µs per layer (negative = saved)")
    ax.set_title("kernel time per layer, ON - OFF (hatched = n/f)\n" + title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "components.png"), dpi=120)
    plt.close(fig)
    print(f"plot_compare: wrote {out}/throughput.png and {out}/components.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
