#!/usr/bin/env python3
"""Regenerates tests/data/golden/: small DeepSeek-family checkpoints with seeded random weights,
saved as published checkpoints are (config.json + safetensors, routed experts one tensor per
expert, optional index with shards, optional block-scaled FP8), and the greedy tokens and
last-step logits that Hugging Face transformers' own implementation (CPU torch, float32, eager
attention) gives for fixed prompts. tests/test_golden.c compares prezero against them; CI needs
no torch, only this script does:

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install -r tools/requirements-golden.txt
    /tmp/venv/bin/python tools/make_golden.py [--out tests/data/golden] [--only NAME ...]

Models: deepseek_v3 (q LoRA, noaux_tc, YaRN; index + 2 shards), deepseek_v2_lite (q_proj, greedy),
deepseek_v3_fp8 (as deepseek_v3, FP8 16x16 blocks), deepseek_v3_int4 (2 layers, routed experts
compressed-tensors pack-quantized INT4 made by the compressed-tensors package), moonlight (deepseek_v3 without q LoRA, Moonlight-16B-A3B)
and deepseek_v2 (q LoRA, group_limited_greedy, routed_scaling_factor 16, YaRN mscale 0.707: DeepSeek-V2 / V2.5).

Why the comparison is meaningful and what tolerance it allows:
- Every weight is rounded to bf16 before it is put into the float32 HF model and saved as BF16
  (FP8 for the fp8 model: HF gets exactly the dequantised values), so both sides hold identical
  weights. HF then runs in float32 throughout; prezero rounds some activations to bf16 (RMSNorm
  outputs, the KV cache, the MLA output before o_proj, the SwiGLU product), which is the only
  intended difference. The tolerance written to expected.json is
  logits_atol = 0.02 + 0.03 * max|logit| (0.12-0.13 for these models); the differences measured
  by tests/test_golden.c are 0.016-0.028, and dropping YaRN from the config moves them to ~3.9.
- Prompts are chosen so that at every greedy step the top-1 logit beats the top-2 by at least
  MARGIN, far above the tolerance, so greedy tokens must be equal.
- Routing (noaux_tc) in this transformers version masks dropped groups with -inf as prezero does;
  the e_score_correction_bias is drawn >= 0 so every choice value is positive anyway.
- RoPE: DeepSeek's interleaved-pair convention (HF rope_interleave=True) as prezero's reference;
  the V3-layout models use YaRN (factor 4, mscale 1, mscale_all_dim 0.8), which exercises the
  interpolated frequencies, the cos/sin multiplier and the softmax-scale correction.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file

MARGIN = 0.25          # min top-1 minus top-2 logit over all recorded greedy steps
STEPS = 6              # greedy tokens per prompt
PROMPT_LENS = [5, 3, 7]

V3 = dict(
    architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3",
    vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
    num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
    n_shared_experts=1, n_routed_experts=8, routed_scaling_factor=2.5,
    kv_lora_rank=32, q_lora_rank=32, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16,
    topk_method="noaux_tc", scoring_func="sigmoid", n_group=2, topk_group=1, num_experts_per_tok=2,
    moe_layer_freq=1, first_k_dense_replace=1, norm_topk_prob=True, hidden_act="silu",
    max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=10000.0,
    rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 32,
                  "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.8},
    tie_word_embeddings=False, attention_bias=False, torch_dtype="bfloat16",
)
V2_LITE = dict(
    architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2",
    vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=24,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
    n_shared_experts=2, n_routed_experts=8, routed_scaling_factor=1.0,
    kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16,
    topk_method="greedy", scoring_func="softmax", n_group=1, topk_group=1, num_experts_per_tok=2,
    moe_layer_freq=1, first_k_dense_replace=1, norm_topk_prob=False, hidden_act="silu",
    max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling=None,
    tie_word_embeddings=False, attention_bias=False, torch_dtype="bfloat16",
)
# Moonlight-16B-A3B's layout: model_type deepseek_v3 without q LoRA (q_proj, as V2-Lite) with V3's
# routing (noaux_tc over sigmoid scores, one group), 2 shared experts, routed_scaling_factor 2.446,
# rms_norm_eps 1e-5, rope_theta 5e4 and no rope_scaling.
MOONLIGHT = dict(
    V3, q_lora_rank=None, n_shared_experts=2, n_group=1, topk_group=1, routed_scaling_factor=2.446,
    num_experts_per_tok=3, rms_norm_eps=1e-5, rope_theta=50000.0, rope_scaling=None,
)
# DeepSeek-V2 / V2.5 (236B)'s layout: model_type deepseek_v2 with q LoRA, group_limited_greedy over
# softmax scores (groups ranked by their max score), norm_topk_prob false with routed_scaling_factor
# (16 in the published file), YaRN with mscale = mscale_all_dim = 0.707.
V2 = dict(
    V2_LITE, q_lora_rank=32, n_group=4, topk_group=2, num_experts_per_tok=3, topk_method="group_limited_greedy",
    routed_scaling_factor=16.0, num_hidden_layers=3,
    rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 32,
                  "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
)

# DeepSeek-V3 / Kimi-K2 with INT4 routed experts: two layers (dense, MoE) to keep the files small;
# moe_intermediate_size 128 so that TP 4 keeps whole groups of 32.
V3_INT4 = dict(V3, num_hidden_layers=2, moe_intermediate_size=128)


def hf_model(cfg):
    kw = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype",
                                                    "rope_theta", "rope_scaling", "moe_layer_freq",
                                                    "scoring_func")}
    if cfg["model_type"] == "deepseek_v3":
        kw.pop("topk_method")
        kw["rope_interleave"] = True
        c = transformers.DeepseekV3Config(**kw)
        cls = transformers.DeepseekV3ForCausalLM
    else:
        c = transformers.DeepseekV2Config(**kw)
        cls = transformers.DeepseekV2ForCausalLM
    rs = cfg["rope_scaling"]
    if rs:
        c.rope_parameters = {"rope_type": "yarn", "rope_theta": cfg["rope_theta"], "factor": rs["factor"],
                             "original_max_position_embeddings": rs["original_max_position_embeddings"],
                             "beta_fast": rs["beta_fast"], "beta_slow": rs["beta_slow"], "mscale": rs["mscale"],
                             "mscale_all_dim": rs["mscale_all_dim"]}
    else:
        c.rope_parameters = {"rope_type": "default", "rope_theta": cfg["rope_theta"]}
    c._attn_implementation = "eager"
    torch.manual_seed(0)
    m = cls(c).float().eval()
    return m


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


def fill_weights(model, cfg, seed):
    """Seeded weights, every one bf16-representable (the bias stays f32, as published)."""
    g = torch.Generator().manual_seed(seed)
    sd = model.state_dict()
    new = {}
    for k, v in sd.items():
        if k.endswith("e_score_correction_bias"):
            new[k] = torch.rand(v.shape, generator=g) * 0.05
        elif k.endswith("norm.weight") or k.endswith("layernorm.weight"):
            new[k] = bf16(1.0 + 0.1 * torch.randn(v.shape, generator=g))
        elif k.endswith("embed_tokens.weight"):
            new[k] = bf16(torch.randn(v.shape, generator=g))
        elif v.dim() >= 2:
            fan_in = v.shape[-1]
            new[k] = bf16(torch.randn(v.shape, generator=g) / np.sqrt(fan_in))
        else:
            new[k] = v
    model.load_state_dict(new, strict=True)


def published_tensors(model, cfg):
    """State dict in the published layout: per-expert gate/up/down, router as mlp.gate.weight."""
    out = {}
    for k, v in model.state_dict().items():
        if k.endswith("mlp.experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            inter = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{pre}{e}.gate_proj.weight"] = v[e, :inter].clone()
                out[f"{pre}{e}.up_proj.weight"] = v[e, inter:].clone()
        elif k.endswith("mlp.experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{pre}{e}.down_proj.weight"] = v[e].clone()
        else:
            out[k] = v.clone()
    for k in list(out):
        if not k.endswith("e_score_correction_bias"):
            out[k] = out[k].to(torch.bfloat16)
    return out


def fp8_quantise(w, block):
    """DeepSeek-V3-style block FP8: returns (e4m3 weight, f32 scale_inv[ceil(r/b), ceil(c/b)]) with
    dequant = e4m3 * scale_inv per block."""
    w = w.to(torch.float32)
    r, c = w.shape
    sr, sc = (r + block - 1) // block, (c + block - 1) // block
    scale = torch.zeros(sr, sc)
    q = torch.zeros(r, c, dtype=torch.float8_e4m3fn)
    for i in range(sr):
        for j in range(sc):
            blk = w[i * block:(i + 1) * block, j * block:(j + 1) * block]
            s = blk.abs().max().item() / 448.0
            s = s if s > 0 else 1.0
            scale[i, j] = s
            q[i * block:(i + 1) * block, j * block:(j + 1) * block] = (blk / s).to(torch.float8_e4m3fn)
    return q, scale


def to_int4(tensors, model):
    """Routed experts as compressed-tensors pack-quantized INT4 (symmetric, group 32), written by the
    compressed-tensors package itself: the published tensors become a module tree (every *_proj and
    lm_head a Linear), its QuantizationConfig is applied with Kimi-K2's targets / ignore (only the routed
    experts' Linear modules), each group's scale comes from its calculate_qparams, and ModelCompressor
    compresses and writes the quantization_config. The HF model gets the values compressed-tensors
    decompresses, so both sides hold the same weights. Returns (tensors, compressor)."""
    import torch.nn as nn
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig, QuantizationScheme,
                                                 apply_quantization_config)
    from compressed_tensors.quantization.utils import calculate_qparams
    root = nn.Module()
    for k, v in tensors.items():
        parts = k.split(".")
        lin = v.dim() == 2 and (k.endswith("_proj.weight") or k == "lm_head.weight")
        m = root
        for p in parts[:-2] if lin else parts[:-1]:
            if not hasattr(m, p):
                m.add_module(p, nn.Module())
            m = getattr(m, p)
        if lin:
            mod = nn.Linear(v.shape[1], v.shape[0], bias=False, dtype=v.dtype)
            mod.weight.data.copy_(v)
            m.add_module(parts[-2], mod)
        else:
            m.register_parameter(parts[-1], nn.Parameter(v.clone(), requires_grad=False))
    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32)
    qc = QuantizationConfig(config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=args)},
                            ignore=["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                                    "re:.*mlp\\.(gate|up|down)_proj.*"], format="pack-quantized")
    apply_quantization_config(root, qc)
    for _, m in root.named_modules():
        if hasattr(m, "weight_scale"):
            g = m.weight.data.float().view(m.weight.shape[0], -1, 32)
            scale, _ = calculate_qparams(g.amin(dim=2), g.amax(dim=2), args)
            m.weight_scale.data.copy_(scale.to(m.weight_scale.dtype))
    comp = ModelCompressor.from_pretrained_model(root, quantization_format="pack-quantized")
    comp.compress_model(root)
    out = {k: v.contiguous() for k, v in root.state_dict().items()}
    assert any(k.endswith("experts.0.gate_proj.weight_packed") for k in out)
    comp.decompress_model(root)
    deq = root.state_dict()
    sd = model.state_dict()
    for k in sd:
        if k.endswith("mlp.experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            inter = sd[k].shape[1] // 2
            for e in range(sd[k].shape[0]):
                sd[k][e, :inter] = deq[f"{pre}{e}.gate_proj.weight"].float()
                sd[k][e, inter:] = deq[f"{pre}{e}.up_proj.weight"].float()
        elif k.endswith("mlp.experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(sd[k].shape[0]):
                sd[k][e] = deq[f"{pre}{e}.down_proj.weight"].float()
    model.load_state_dict(sd, strict=True)
    return out, comp


def dequant(q, scale, block):
    r, c = q.shape
    s = scale.repeat_interleave(block, 0)[:r].repeat_interleave(block, 1)[:, :c]
    return bf16(q.to(torch.float32) * s)


def to_fp8(tensors, model, block):
    """Linear weights of attention and MLPs (not embed, lm_head, norms, router) as FP8 + scales;
    the model's weights are replaced by the dequantised values so HF sees what prezero loads."""
    out = {}
    deq = {}
    for k, v in tensors.items():
        fp8 = (v.dim() == 2 and k.endswith("_proj.weight") and "embed" not in k)
        if fp8:
            q, s = fp8_quantise(v, block)
            out[k] = q
            out[k + "_scale_inv"] = s
            deq[k] = dequant(q, s, block)
        else:
            out[k] = v
    # Fold the dequantised values back into the HF model (experts are fused there).
    sd = model.state_dict()
    for k in sd:
        if k.endswith("mlp.experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            for e in range(sd[k].shape[0]):
                inter = sd[k].shape[1] // 2
                sd[k][e, :inter] = deq[f"{pre}{e}.gate_proj.weight"]
                sd[k][e, inter:] = deq[f"{pre}{e}.up_proj.weight"]
        elif k.endswith("mlp.experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(sd[k].shape[0]):
                sd[k][e] = deq[f"{pre}{e}.down_proj.weight"]
        elif k in deq:
            sd[k] = deq[k]
    model.load_state_dict(sd, strict=True)
    return out


@torch.no_grad()
def greedy(model, prompt, steps):
    """Greedy decode by full recomputation (no KV cache: an independent path from prezero's
    one-token decode). Returns tokens, the last step's logits, and the smallest top-1/top-2 gap."""
    ids = list(prompt)
    toks, margin, last = [], float("inf"), None
    for _ in range(steps):
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].to(torch.float32)
        top2 = torch.topk(logits, 2).values
        margin = min(margin, (top2[0] - top2[1]).item())
        t = int(torch.argmax(logits))
        toks.append(t)
        ids.append(t)
        last = logits
    return toks, last, margin


def save(out_dir, cfg, tensors, shards, extra_cfg=None):
    os.makedirs(out_dir, exist_ok=True)
    c = dict(cfg)
    if extra_cfg:
        c.update(extra_cfg)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    names = sorted(tensors)
    if shards == 1:
        save_file({k: tensors[k].contiguous() for k in names}, os.path.join(out_dir, "model.safetensors"),
                  metadata={"format": "pt"})
        return
    # Split by layer, as published shards are: embed + early layers first, lm_head last.
    per = (len(names) + shards - 1) // shards
    wm = {}
    total = 0
    for s in range(shards):
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = names[s * per:(s + 1) * per]
        save_file({k: tensors[k].contiguous() for k in part}, os.path.join(out_dir, fn), metadata={"format": "pt"})
        for k in part:
            wm[k] = fn
            total += tensors[k].numel() * tensors[k].element_size()
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f, indent=2)


def make(name, cfg, out_root, seed, shards=1, fp8_block=0, int4=False):
    model = hf_model(cfg)
    fill_weights(model, cfg, seed)
    tensors = published_tensors(model, cfg)
    extra = None
    if fp8_block:
        tensors = to_fp8(tensors, model, fp8_block)
        extra = {"quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                         "weight_block_size": [fp8_block, fp8_block]}}
    comp = None
    if int4:
        tensors, comp = to_int4(tensors, model)
    rng = np.random.default_rng(seed)
    prompts, tokens, logits, margins = [], [], [], []
    tries = 0
    while len(prompts) < len(PROMPT_LENS):
        n = PROMPT_LENS[len(prompts)]
        p = [int(x) for x in rng.integers(0, cfg["vocab_size"], n)]
        t, lg, mg = greedy(model, p, STEPS)
        tries += 1
        if mg < MARGIN:
            continue
        prompts.append(p)
        tokens.append(t)
        logits.append(lg.numpy().astype("<f4"))
        margins.append(mg)
    out_dir = os.path.join(out_root, name)
    save(out_dir, cfg, tensors, shards, extra)
    if comp is not None:
        comp.update_config(out_dir)  # the quantization_config, as llm-compressor writes it
    np.concatenate(logits).tofile(os.path.join(out_dir, "logits.f32"))
    # The bf16 activation roundings prezero makes perturb each logit by about 2^-8 relative per
    # rounding point; bound it by the logit scale (measured: see the C test's printout).
    scale = float(max(np.abs(l).max() for l in logits))
    exp = {
        "prompts": prompts, "steps": STEPS, "tokens": tokens, "vocab_size": cfg["vocab_size"],
        "logits_file": "logits.f32", "logits_layout": "f32 little-endian [n_prompts, vocab_size]",
        "logits_atol": round(0.02 + 0.03 * scale, 4), "min_margin": round(min(margins), 4),
        "max_abs_logit": round(scale, 4),
        "generator": {"transformers": transformers.__version__, "torch": torch.__version__,
                      "dtype": "float32", "attention": "eager", "seed": seed, "prompt_draws": tries},
    }
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(exp, f, indent=1)
    print(f"{name}: prompts {prompts} tokens {tokens} min margin {min(margins):.3f} |logit| max {scale:.2f} "
          f"({tries} prompt draws)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                                                  "golden"))
    ap.add_argument("--only", nargs="*", help="model names to regenerate (default: all)")
    a = ap.parse_args()
    models = [("deepseek_v3", V3, dict(seed=1, shards=2)), ("deepseek_v2_lite", V2_LITE, dict(seed=2)),
              ("deepseek_v3_fp8", V3, dict(seed=3, fp8_block=16)), ("moonlight", MOONLIGHT, dict(seed=4)),
              ("deepseek_v2", V2, dict(seed=5)), ("deepseek_v3_int4", V3_INT4, dict(seed=6, int4=True))]
    for name, cfg, kw in models:
        if not a.only or name in a.only:
            make(name, cfg, a.out, **kw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
