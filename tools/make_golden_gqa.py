#!/usr/bin/env python3
"""Adds the GQA layouts to tests/data/golden/: small Llama 3 / Qwen2 / Qwen3 / Qwen3-MoE / Mixtral
checkpoints with seeded random weights, saved in the published layout (config.json + one BF16
model.safetensors: separate q/k/v_proj, gate/up/down_proj, Qwen3-MoE experts one tensor per
expert, Mixtral's block_sparse_moe.experts.E.w1/w2/w3, no lm_head.weight when the embeddings are
tied), with the greedy tokens and last-step logits that Hugging Face transformers' own
implementation (CPU torch, float32, eager attention) gives for fixed prompts. It shares
tools/make_golden.py's conventions (and its helpers: bf16 rounding, greedy by full
recomputation, the expected.json / logits.f32 format). tests/test_golden_gqa.c compares prezero
against them; CI needs no torch, only this script does:

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install -r tools/requirements-golden.txt
    /tmp/venv/bin/python tools/make_golden_gqa.py [--out tests/data/golden]

Models (every one hidden 64, vocab 256, 4 heads / 2 kv heads, intermediate sizes divisible by 4,
so TP 1, 2 and 4 all build and TP 4 replicates the kv heads (rank r holds kv head r / 2); at TP 1
every GEMM's n and k are multiples of 64 (qkv n = (4 + 2*2) * head_dim, intermediate_size 128) so
the CUDA GEMMs' shape limits hold too):
- llama: Llama 3.1 layout, GQA 4 heads / 2 kv heads, rope_scaling llama3 (factor 8,
  low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 64, rope_theta 5e5: with
  head_dim 16 the inverse frequencies fall in all three bands: kept, smoothed, divided).
- qwen2: q/k/v biases (drawn N(0, 0.5^2), bf16-exact, stored BF16 as Qwen2.5 does).
- qwen2_tied: as qwen2 with tie_word_embeddings true (no lm_head.weight stored), as the small
  Qwen2.5 models.
- qwen3: per-head q_norm / k_norm, head_dim 32 != hidden_size / num_attention_heads = 16.
- qwen3_moe: 8 experts top-2, norm_topk_prob true, decoder_sparse_step 1, mlp_only_layers [0]
  (layer 0 dense with intermediate_size, layers 1-2 MoE with moe_intermediate_size), head_dim 32.
- mixtral: 4 experts top-2 (num_local_experts), experts of intermediate_size.
- qwen3_yarn: qwen3 with rope_scaling yarn (factor 4, original_max_position_embeddings 32, as Qwen documents
  for long context): inverse frequencies interpolated outside the correction range and cos/sin scaled by
  0.1 ln 4 + 1.
- mistral_nemo: model_type mistral (Mistral-Nemo's layout) with head_dim 32 given explicitly, != hidden_size /
  num_attention_heads = 16, sliding_window null.
- llama32_tied: llama with tie_word_embeddings true and rope_scaling llama3 factor 32 (Llama 3.2 1B / 3B).
- glm4_moe: GLM-4.5 / GLM-4.5-Air's layout (Glm4MoeForCausalLM): q/k/v biases, use_qk_norm, head_dim 32 with
  partial_rotary_factor 0.5 (RoPE on the first 16 dims of each head, rotate-half within them), layer 0 dense
  (first_k_dense_replace 1), layers 1-2 DeepSeek-V3 MoE: 8 experts in 2 groups (topk_group 1), top-2 over
  sigmoid scores + e_score_correction_bias (F32, as published), norm_topk_prob, routed_scaling_factor 2.5, one
  shared expert; moe_intermediate_size 16 and intermediate_size 64 keep the file small. The checkpoint also
  holds a stub of the next-token-prediction layer past num_hidden_layers (model.layers.3.eh_proj / enorm /
  hnorm and a q_proj bias), which prezero must not read. Its router margin is taken on the selection scores
  (sigmoid + bias: the group top-2 sums and the k-th expert), at least GLM_ROUTER_MARGIN.
- phi3: Phi-3 / Phi-4's layout (Phi3ForCausalLM, model_type phi3): Llama's math with the published fused
  tensors self_attn.qkv_proj.weight [(heads + 2*kv_heads)*head_dim, hidden] (q rows, then k, then v) and
  mlp.gate_up_proj.weight [2*intermediate_size, hidden] (gate rows, then up), default RoPE, sliding_window null
  (microsoft/phi-4's settings, small). Its sensitivity swaps the gate and up halves of every gate_up_proj.
- phi3_partial: phi3 with Phi-4-mini's partial_rotary_factor 0.75 (RoPE on the first 12 of 16 dims) and tied
  embeddings, with default RoPE (LongRoPE: phi3_longrope), and sliding_window 64 below
  max_position_embeddings 128 (Phi-3-mini-4k's 2047 under 4096): the window masks nothing in these sequences of
  at most 64 tokens.
- phi3_longrope: phi3 with LongRoPE as Phi-3-mini-128k / Phi-3.5-mini / Phi-4-mini publish it (rope_scaling
  {"type": "longrope", "short_factor", "long_factor"}, a top-level original_max_position_embeddings), made small:
  partial_rotary_factor 0.75 (6 factors of each kind for the 12 rotated dims), distinct short and long factors,
  original_max_position_embeddings 6 under max_position_embeddings 128 (attention factor
  sqrt(1 + ln(128 / 6) / ln 6) = 1.6456 on cos and sin) and sliding_window 64 (on every layer; the test sequences
  fit it). Its reference is decoded one token at a time with a KV cache,
  the prompt included (greedy_cached): transformers' longrope update then rotates the token at position p by
  the long factors exactly when p >= 6, and its cached keys keep their rotation, which is prezero's
  per-position rule; the generator checks that rule on every call of the rotary embedding. Every prompt
  crosses position 6 (the 7-token prompt inside itself, the others in the generated tokens). Controls (stored
  under "controls", HF logits' change): the short factors or the long factors at every position, attention
  factor 1, and greedy by full recomputation (one forward over the whole sequence, which rotates every
  position by the long factors once the sequence is longer than 6: transformers' prefill rule).
  expected.json also stores transformers' short and long inverse-frequency tables and its attention factor
  ("longrope"), which the test compares with prezero's.
- dots1: dots.llm1's layout (Dots1ForCausalLM, model_type dots1): Qwen3's attention (per-head q_norm / k_norm, no
  biases, full RoPE, head_dim hidden_size / num_attention_heads = 16 as the published config leaves it out) with
  DeepSeek-V3's MoE: layer 0 dense (first_k_dense_replace 1), layers 1-2 with 8 experts in 4 groups of 2, top-2
  within the best topk_group 2 groups over sigmoid scores + e_score_correction_bias (F32, drawn U(0, 0.3) so that
  the bias moves selections), norm_topk_prob, routed_scaling_factor 2.5 and n_shared_experts 2 (one shared MLP
  of 2 * moe_intermediate_size); sliding_window 64 with max_window_layers 2 (layer 2 a sliding layer) under
  max_position_embeddings 128: the window masks nothing in these sequences of at most 64 tokens. Router margin as glm4_moe's. Besides the stored sensitivity (q/k norms
  removed) it prints, and stores under "controls", the HF logits' change with the correction bias zeroed, with
  routed_scaling_factor 1 and with every group allowed (topk_group = n_group).
- mistral_sw: model_type mistral with sliding_window 8 (Mistral-7B-v0.1's window on every layer, MistralModel's
  one sliding mask), 2 layers, head_dim 16.
- qwen2_sw: qwen2 with use_sliding_window true, sliding_window 8 and max_window_layers 1 over 3 layers (layer 0 full
  attention, layers 1-2 sliding: Qwen2Config's layer_types).
  Both decode prompts of 19, 25 and 31 random tokens for 6 steps (25-37 positions, more than 3 windows; fewer
  steps than the window, so the last window still holds prompt tokens and does not settle into a repeated token),
  one token per forward through transformers' DynamicCache (greedy_cached), whose sliding layers
  (DynamicSlidingWindowLayer) keep only the window's keys: the path a decoder with a KV cache takes. The greedy
  run by full recomputation (the sliding mask over the whole sequence) must give the same tokens and logits within
  1e-4, and the gap is stored. The sensitivity is the HF logits' change with the window removed (sliding_window
  null / use_sliding_window false); "controls" holds it for windows 7 and 9 (one position more or less than the
  rule p - j < 8 keeps).
- mistral_lt: mistral_sw over 3 layers with layer_types [sliding, full, sliding] (Ministral-8B's alternation):
  transformers' AutoConfig reads a model_type mistral config.json that has layer_types as ministral (the generator
  builds MinistralForCausalLM and checks that the saved config.json reads back as ministral), whose model slides
  only the listed layers. Decoded as mistral_sw; its sensitivity is the change with layer_types dropped (every
  layer sliding, MistralModel's placement), its controls windows 7 and 9.

Why the comparison is meaningful and what tolerance it allows (as make_golden.py):
- Every weight is rounded to bf16 before it goes into the float32 HF model and is saved as BF16,
  so both sides hold identical weights. HF then runs in float32 throughout; prezero rounds some
  activations to bf16 (RMSNorm outputs, the K/V cache, the attention output before o_proj, the
  SwiGLU product), the only intended difference. The tolerance written to expected.json is the
  DeepSeek one, logits_atol = 0.02 + 0.03 * max|logit|: each bf16 rounding perturbs an activation
  by <= 2^-9 relative, a few such points per layer over 2-3 layers move a logit by well under 1 %
  of the logit scale. logits_atol is 0.117-0.148 for these models; the differences measured by
  tests/test_golden_gqa.c are 0.009-0.016 (the same at TP 1, 2 and 4), while removing one feature
  moves the HF logits by 0.35-3.3 (see Sensitivity below).
- HF's own casts to a lower dtype are no-ops in these float32 runs: Qwen3-MoE's router casts its
  top-k weights to the router logits' dtype (float32 here), every RMSNorm casts back to its input
  dtype (float32 here), Mixtral's softmax is taken in float; so the reference is float32 end to end.
- Routing: Qwen3-MoE takes softmax over all experts, top-k, then divides by the top-k sum
  (norm_topk_prob); Mixtral does the same (always renormalised), which equals a softmax over the
  k largest router logits up to rounding (prezero's PZ_SCORE_TOPK_SOFTMAX).
- Prompts are chosen so that at every greedy step the top-1 logit beats the top-2 by at least
  MARGIN (far above the tolerance), so greedy tokens must be equal; for the MoE models also every
  token's k-th router logit beats the (k+1)-th by at least ROUTER_MARGIN (far above the bf16
  perturbation of a router logit, ~0.002), so prezero picks the same experts.
- Sensitivity (printed, and stored in expected.json as "sensitivity"): the HF logits recomputed
  with one feature removed (llama: rope_scaling dropped; qwen2: q/k/v biases zeroed; qwen3 /
  qwen3_moe: q_norm / k_norm removed) move by far more than logits_atol, so the tolerance resolves
  each feature the loader and the kernels must get right.
"""
import argparse
import copy
import json
import os
import sys

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402  (bf16, greedy's conventions, save)

MARGIN = mg.MARGIN        # min top-1 minus top-2 logit over all recorded greedy steps
ROUTER_MARGIN = 0.05      # min k-th minus (k+1)-th router logit over all tokens (MoE models)
GLM_ROUTER_MARGIN = 0.01  # glm4_moe: min gap of its selection scores (sigmoid, slope <= 1/4, + bias)
STEPS = mg.STEPS
PROMPT_LENS = mg.PROMPT_LENS

COMMON = dict(vocab_size=256, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, hidden_act="silu",
              tie_word_embeddings=False, torch_dtype="bfloat16")
LLAMA = dict(COMMON, architectures=["LlamaForCausalLM"], model_type="llama", intermediate_size=128,
             num_hidden_layers=2, head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=500000.0,
             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 64},
             attention_bias=False, mlp_bias=False)
QWEN2 = dict(COMMON, architectures=["Qwen2ForCausalLM"], model_type="qwen2", intermediate_size=128,
             num_hidden_layers=2, max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
             rope_scaling=None, use_sliding_window=False, sliding_window=128, max_window_layers=2)
QWEN2_TIED = dict(QWEN2, tie_word_embeddings=True)
QWEN3 = dict(COMMON, architectures=["Qwen3ForCausalLM"], model_type="qwen3", intermediate_size=128,
             num_hidden_layers=2, head_dim=32, max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
             rope_scaling=None, attention_bias=False, use_sliding_window=False, sliding_window=None)
QWEN3_MOE = dict(COMMON, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", intermediate_size=128,
                 moe_intermediate_size=32, num_hidden_layers=3, head_dim=32, num_experts=8, num_experts_per_tok=2,
                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0], max_position_embeddings=128,
                 rms_norm_eps=1e-6, rope_theta=1000000.0, rope_scaling=None, attention_bias=False,
                 use_sliding_window=False, sliding_window=None, output_router_logits=False)
QWEN3_YARN = dict(QWEN3, rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32})
MIXTRAL = dict(COMMON, architectures=["MixtralForCausalLM"], model_type="mixtral", intermediate_size=64,
               num_hidden_layers=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
               max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=1000000.0, rope_scaling=None,
               sliding_window=None, router_jitter_noise=0.0, output_router_logits=False)
# Mistral-Nemo's layout: model_type mistral (Llama's tensors, no biases) with head_dim 32 given
# explicitly, != hidden_size / num_attention_heads = 16, and sliding_window null.
MISTRAL_NEMO = dict(COMMON, architectures=["MistralForCausalLM"], model_type="mistral", intermediate_size=128,
                    num_hidden_layers=2, head_dim=32, max_position_embeddings=128, rms_norm_eps=1e-5,
                    rope_theta=1000000.0, rope_scaling=None, sliding_window=None)
# Llama 3.2 1B / 3B: tied embeddings (no lm_head.weight) with rope_scaling llama3 (factor 32).
LLAMA32_TIED = dict(LLAMA, tie_word_embeddings=True,
                    rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64})

# Phi-3 / Phi-4's layout (model_type phi3: fused qkv_proj and gate_up_proj), small; pad_token_id None
# (Phi3Config's 32000 is past this vocabulary).
PHI3 = dict(COMMON, architectures=["Phi3ForCausalLM"], model_type="phi3", intermediate_size=128, num_hidden_layers=2,
            max_position_embeddings=128, original_max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0,
            rope_scaling=None, sliding_window=None, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0,
            pad_token_id=None, bos_token_id=1, eos_token_id=2)
# Phi-4-mini's partial RoPE and tied embeddings (default RoPE), with a sliding window below
# max_position_embeddings as Phi-3-mini-4k publishes one.
PHI3_PARTIAL = dict(PHI3, tie_word_embeddings=True, partial_rotary_factor=0.75, sliding_window=64)

# Phi-3-mini-128k / Phi-3.5-mini / Phi-4-mini's LongRoPE, small: 12 of 16 dims rotated (6 factors each), a short
# original context (6) so that every prompt crosses it, and a sliding window below max_position_embeddings.
PHI3_LONGROPE = dict(PHI3, partial_rotary_factor=0.75, original_max_position_embeddings=6, sliding_window=64,
                     rope_scaling={"type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0, 3.0, 4.0],
                                   "long_factor": [1.7, 2.5, 4.0, 8.0, 16.0, 32.0]})

# Sliding-window attention, a window of 8 that the sequences outgrow: Mistral's on every layer, Qwen2's on the layers
# from max_window_layers on (layer 0 full, layers 1-2 sliding).
MISTRAL_SW = dict(COMMON, architectures=["MistralForCausalLM"], model_type="mistral", intermediate_size=128,
                  num_hidden_layers=2, head_dim=16, max_position_embeddings=128, rms_norm_eps=1e-5,
                  rope_theta=10000.0, rope_scaling=None, sliding_window=8)
QWEN2_SW = dict(QWEN2, num_hidden_layers=3, use_sliding_window=True, sliding_window=8, max_window_layers=1)
# model_type mistral with layer_types (Ministral-8B's alternation, small): AutoConfig reads such a config.json as
# ministral, whose model slides only the "sliding_attention" layers (layers 0 and 2 here, layer 1 full).
MISTRAL_LT = dict(MISTRAL_SW, num_hidden_layers=3,
                  layer_types=["sliding_attention", "full_attention", "sliding_attention"])
SW_DECODE = ([19, 25, 31], 6)  # prompt lengths and steps of the sliding-window models
LONG = {"mistral_sw": SW_DECODE, "qwen2_sw": SW_DECODE, "mistral_lt": SW_DECODE}

# GLM-4.5 / GLM-4.5-Air's layout (model_type glm4_moe), small.
GLM4_MOE = dict(COMMON, architectures=["Glm4MoeForCausalLM"], model_type="glm4_moe", intermediate_size=64,
                moe_intermediate_size=16, num_hidden_layers=3, head_dim=32, n_routed_experts=8, num_experts_per_tok=2,
                n_shared_experts=1, n_group=2, topk_group=1, first_k_dense_replace=1, norm_topk_prob=True,
                routed_scaling_factor=2.5, partial_rotary_factor=0.5, attention_bias=True, use_qk_norm=True,
                max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None,
                num_nextn_predict_layers=1)

# dots.llm1's layout (model_type dots1), small: grouped routing (4 groups, 2 chosen), two shared experts' width,
# one dense layer first, routed_scaling_factor 2.5, and a sliding layer whose window covers every test sequence.
DOTS1 = dict(COMMON, architectures=["Dots1ForCausalLM"], model_type="dots1", intermediate_size=64,
             moe_intermediate_size=16, num_hidden_layers=3, n_routed_experts=8, num_experts_per_tok=2,
             n_shared_experts=2, n_group=4, topk_group=2, first_k_dense_replace=1, norm_topk_prob=True,
             routed_scaling_factor=2.5, attention_bias=False, max_position_embeddings=128, rms_norm_eps=1e-5,
             rope_theta=10000000.0, rope_scaling=None, sliding_window=64, max_window_layers=2)
BIAS_SCALE = {"dots1": 0.3}  # e_score_correction_bias ~ U(0, scale); 0.05 otherwise

CLASSES = {
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM),
    "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM),
    "glm4_moe": (transformers.Glm4MoeConfig, transformers.Glm4MoeForCausalLM),
    "phi3": (transformers.Phi3Config, transformers.Phi3ForCausalLM),
    "dots1": (transformers.Dots1Config, transformers.Dots1ForCausalLM),
}


def is_longrope(cfg):
    return (cfg.get("rope_scaling") or {}).get("type") == "longrope"


def hf_model(cfg):
    if is_longrope(cfg):  # the config.json keys as from_pretrained passes them (Phi3Config reads rope_scaling)
        kw = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype")}
        c = CLASSES[cfg["model_type"]][0](**copy.deepcopy(kw))
        rp = c.rope_parameters
        assert rp["rope_type"] == "longrope" and rp["original_max_position_embeddings"] == \
            cfg["original_max_position_embeddings"] and rp["partial_rotary_factor"] == cfg["partial_rotary_factor"], rp
        c._attn_implementation = "eager"
        torch.manual_seed(0)
        return CLASSES[cfg["model_type"]][1](c).float().eval()
    drop = ("architectures", "model_type", "torch_dtype", "rope_theta", "rope_scaling")
    if cfg["model_type"] not in ("dots1", "qwen2"):  # Dots1Config and Qwen2Config place their sliding layers by it
        drop += ("max_window_layers",)
    kw = {k: v for k, v in cfg.items() if k not in drop}
    conf_cls, model_cls = CLASSES[cfg["model_type"]]
    if cfg["model_type"] == "mistral" and "layer_types" in cfg:  # what AutoConfig makes of this config.json
        conf_cls, model_cls = transformers.MinistralConfig, transformers.MinistralForCausalLM
    c = conf_cls(**kw)
    rs = cfg["rope_scaling"]
    c.rope_parameters = dict(rs, rope_theta=cfg["rope_theta"]) if rs else {"rope_type": "default",
                                                                          "rope_theta": cfg["rope_theta"]}
    if "partial_rotary_factor" in cfg:  # the rotary embedding reads it from rope_parameters only
        c.rope_parameters["partial_rotary_factor"] = cfg["partial_rotary_factor"]
    c._attn_implementation = "eager"
    torch.manual_seed(0)
    return model_cls(c).float().eval()


def fill_weights(model, cfg, seed):
    """Seeded weights, every one bf16-representable. Norm weights 1 + N(0, 0.1^2); q/k/v biases
    N(0, 0.5^2); matrices N(0, 1/fan_in); the embedding N(0, 1), or N(0, 1/H) when tied (so that
    the tied lm_head gives logits of the same O(1) scale as an untied one)."""
    g = torch.Generator().manual_seed(seed)
    tied = cfg["tie_word_embeddings"]
    new = {}
    for k, v in model.state_dict().items():
        if tied and k == "lm_head.weight":
            continue
        if k.endswith("e_score_correction_bias"):  # f32, as make_golden.py's DeepSeek-V3
            new[k] = torch.rand(v.shape, generator=g) * BIAS_SCALE.get(cfg["model_type"], 0.05)
        elif k.endswith("norm.weight") or k.endswith("layernorm.weight"):
            new[k] = mg.bf16(1.0 + 0.1 * torch.randn(v.shape, generator=g))
        elif k.endswith("embed_tokens.weight"):
            new[k] = mg.bf16(torch.randn(v.shape, generator=g) / (np.sqrt(v.shape[1]) if tied else 1.0))
        elif k.endswith("_proj.bias"):
            new[k] = mg.bf16(0.5 * torch.randn(v.shape, generator=g))
        elif v.dim() >= 2:
            new[k] = mg.bf16(torch.randn(v.shape, generator=g) / np.sqrt(v.shape[-1]))
        else:
            raise ValueError(f"no fill rule for {k} {tuple(v.shape)}")
    if tied:
        new["lm_head.weight"] = new["model.embed_tokens.weight"]
    model.load_state_dict(new, strict=True)
    if tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def published_tensors(model, cfg):
    """State dict in the published layout, BF16: transformers >= 5 keeps MoE experts fused
    (mlp.experts.gate_up_proj [E, 2I, H], gate rows first; mlp.experts.down_proj [E, H, I]);
    published Qwen3-MoE has mlp.experts.E.{gate,up,down}_proj.weight, Mixtral
    block_sparse_moe.gate.weight and block_sparse_moe.experts.E.{w1 (gate), w3 (up), w2 (down)}.weight.
    A tied model stores no lm_head.weight."""
    mixtral = cfg["model_type"] == "mixtral"
    out = {}
    for k, v in model.state_dict().items():
        if cfg["tie_word_embeddings"] and k == "lm_head.weight":
            continue
        if k.endswith("mlp.experts.gate_up_proj"):
            pre = k[: -len("experts.gate_up_proj")]
            inter = v.shape[1] // 2
            for e in range(v.shape[0]):
                if mixtral:
                    bp = pre.replace(".mlp.", ".block_sparse_moe.")
                    out[f"{bp}experts.{e}.w1.weight"] = v[e, :inter].clone()
                    out[f"{bp}experts.{e}.w3.weight"] = v[e, inter:].clone()
                else:
                    out[f"{pre}experts.{e}.gate_proj.weight"] = v[e, :inter].clone()
                    out[f"{pre}experts.{e}.up_proj.weight"] = v[e, inter:].clone()
        elif k.endswith("mlp.experts.down_proj"):
            pre = k[: -len("experts.down_proj")]
            for e in range(v.shape[0]):
                if mixtral:
                    out[f"{pre.replace('.mlp.', '.block_sparse_moe.')}experts.{e}.w2.weight"] = v[e].clone()
                else:
                    out[f"{pre}experts.{e}.down_proj.weight"] = v[e].clone()
        elif mixtral and k.endswith("mlp.gate.weight"):
            out[k.replace(".mlp.", ".block_sparse_moe.")] = v.clone()
        else:
            out[k] = v.clone()
    if cfg["model_type"] == "glm4_moe":  # a next-token-prediction layer stub past num_hidden_layers
        g = torch.Generator().manual_seed(99)
        L, H = cfg["num_hidden_layers"], cfg["hidden_size"]
        out[f"model.layers.{L}.eh_proj.weight"] = torch.randn((H, 2 * H), generator=g) / np.sqrt(2 * H)
        out[f"model.layers.{L}.enorm.weight"] = torch.ones(H)
        out[f"model.layers.{L}.hnorm.weight"] = torch.ones(H)
        out[f"model.layers.{L}.self_attn.q_proj.bias"] = torch.randn(cfg["num_attention_heads"] * cfg["head_dim"],
                                                                   generator=g)
    return {k: v if k.endswith("e_score_correction_bias") else v.to(torch.bfloat16) for k, v in out.items()}


class RouterGap:
    """Forward hooks on the MoE routers: the smallest k-th minus (k+1)-th router logit seen."""

    def __init__(self, model, k):
        self.k, self.gap = k, float("inf")
        for m in model.modules():
            if type(m).__name__.endswith("TopKRouter"):
                m.register_forward_hook(self.hook)

    def hook(self, mod, inp, out):
        s = torch.sort(out[0].to(torch.float32), dim=-1, descending=True).values
        self.gap = min(self.gap, float((s[:, self.k - 1] - s[:, self.k]).min()))


class GlmRouterGap:
    """Forward hooks on glm4_moe's and dots1's routers: the smallest gap of the selection, on the scores it selects by
    (sigmoid(logit) + e_score_correction_bias): the topk_group-th minus the next group score (sum of a group's
    top 2) and, within the kept groups, the k-th minus the (k+1)-th expert score."""

    def __init__(self, model):
        self.gap = float("inf")
        for m in model.modules():
            if type(m).__name__ in ("Glm4MoeTopkRouter", "Dots1TopkRouter"):
                m.register_forward_hook(self.hook)

    def hook(self, mod, inp, out):
        s = out[0].to(torch.float32).sigmoid() + mod.e_score_correction_bias
        ng, kg, k = mod.num_group, mod.topk_group, mod.top_k
        gs = s.view(-1, ng, s.shape[-1] // ng).topk(2, dim=-1)[0].sum(-1)
        gsort = torch.sort(gs, dim=-1, descending=True).values
        self.gap = min(self.gap, float((gsort[:, kg - 1] - gsort[:, kg]).min()) if kg < ng else float("inf"))
        keep = torch.zeros_like(gs).scatter_(1, gs.topk(kg, dim=-1)[1], 1).bool()
        masked = s.masked_fill(~keep.repeat_interleave(s.shape[-1] // ng, dim=1), float("-inf"))
        ms = torch.sort(masked, dim=-1, descending=True).values
        if k < kg * (s.shape[-1] // ng):
            self.gap = min(self.gap, float((ms[:, k - 1] - ms[:, k]).min()))


@torch.no_grad()
def last_logits(model, prompts, tokens):
    """Logits at the step of each prompt's last greedy token (the prompt plus all but the last)."""
    return [model(input_ids=torch.tensor([p + t[:-1]])).logits[0, -1].to(torch.float32) for p, t in zip(prompts, tokens)]


class LongRopeRule:
    """Forward hook on a longrope rotary embedding: every call must have rotated by the long inverse
    frequencies exactly when its largest position is >= original_max_position_embeddings (one position per
    call when decoding one token at a time: prezero's per-position rule). Counts the calls of each kind."""

    def __init__(self, model, orig):
        self.orig, self.n = orig, [0, 0]
        model.model.rotary_emb.register_forward_hook(self.hook, with_kwargs=True)

    def hook(self, mod, args, kwargs, out):
        pos = int(kwargs["position_ids"].max())
        long = torch.equal(mod.inv_freq, mod.long_inv_freq)
        assert long != torch.equal(mod.inv_freq, mod.original_inv_freq) and long == (pos >= self.orig), (pos, long)
        self.n[long] += 1


@torch.no_grad()
def cached_logits(model, ids):
    """Logits after each of ids, fed one token per forward with a KV cache (positions 0, 1, ...)."""
    cache = transformers.DynamicCache(config=model.config)
    return [model(input_ids=torch.tensor([[t]]), position_ids=torch.tensor([[i]]), cache=cache,
                  use_cache=True).logits[0, -1].to(torch.float32) for i, t in enumerate(ids)]


def greedy_cached(model, prompt, steps):
    """mg.greedy's tokens, last logits and margin, decoded one token at a time with a KV cache, the prompt
    included (prezero's order of positions)."""
    lg = cached_logits(model, prompt)
    toks, margin, last = [], float("inf"), lg[-1]
    for k in range(steps):
        top2 = torch.topk(last, 2).values
        margin = min(margin, (top2[0] - top2[1]).item())
        toks.append(int(torch.argmax(last)))
        if k + 1 < steps:
            last = cached_logits(model, prompt + toks)[-1]
    return toks, last, margin


def ablated(cfg, model, what):
    """A copy of the model without one feature (for the sensitivity figure), or None."""
    if what in ("short_everywhere", "long_everywhere", "attention_factor_1"):  # longrope's parts
        rs = dict(cfg["rope_scaling"])
        if what == "attention_factor_1":
            rs["attention_factor"] = 1.0
        else:
            rs["short_factor" if what == "long_everywhere" else "long_factor"] = rs[
                "long_factor" if what == "long_everywhere" else "short_factor"]
        m = hf_model(dict(cfg, rope_scaling=rs))
        m.load_state_dict(model.state_dict(), strict=True)
        return m
    if what in ("rope_scaling", "partial_rotary", "sliding_window", "window_minus_1", "window_plus_1", "all_sliding"):
        if what == "all_sliding":  # layer_types dropped: MistralModel's window on every layer
            c = {k: v for k, v in cfg.items() if k != "layer_types"}
        elif what == "sliding_window":  # full attention on every layer
            c = dict(cfg, use_sliding_window=False) if "use_sliding_window" in cfg else dict(cfg, sliding_window=None)
        elif what.startswith("window_"):  # one position less / more in every sliding layer's window
            c = dict(cfg, sliding_window=cfg["sliding_window"] + (1 if what.endswith("plus_1") else -1))
        else:
            c = dict(cfg, rope_scaling=None) if what == "rope_scaling" else dict(cfg, partial_rotary_factor=1.0)
        m = hf_model(c)
        m.load_state_dict(model.state_dict(), strict=True)
        return m
    m = copy.deepcopy(model)
    if what in ("score_bias", "scaling_1", "all_groups"):  # dots1's router: one of its settings undone
        for mod in m.modules():
            if type(mod).__name__.endswith("TopkRouter"):
                if what == "score_bias":
                    mod.e_score_correction_bias.zero_()
                elif what == "scaling_1":
                    mod.routed_scaling_factor = 1.0
                else:
                    mod.topk_group = mod.num_group
        return m
    if what == "gate_up_swap":  # phi3: gate rows and up rows of every fused gate_up_proj exchanged
        for mod in m.modules():
            if hasattr(mod, "gate_up_proj"):
                w = mod.gate_up_proj.weight.data
                w.copy_(torch.cat(w.chunk(2, dim=0)[::-1], dim=0))
        return m
    for mod in m.modules():
        a = getattr(mod, "self_attn", None)
        if a is None:
            continue
        if what == "bias":
            for p in (a.q_proj, a.k_proj, a.v_proj):
                p.bias.data.zero_()
        if what == "qk_norm":
            a.q_norm, a.k_norm = torch.nn.Identity(), torch.nn.Identity()
    return m


SENSITIVITY = {"llama": "rope_scaling", "llama32": "rope_scaling", "qwen2": "bias", "qwen3": "qk_norm", "qwen3_moe": "qk_norm",
               "qwen3_yarn": "rope_scaling", "glm4": "partial_rotary", "phi3": "gate_up_swap",
               "phi3_partial": "partial_rotary", "phi3_longrope": "rope_scaling", "dots1": "qk_norm",
               "mistral_sw": "sliding_window", "qwen2_sw": "sliding_window", "mistral_lt": "all_sliding"}
CONTROLS = {"dots1": ("score_bias", "scaling_1", "all_groups"),  # further ablations, stored under "controls"
            "phi3_longrope": ("short_everywhere", "long_everywhere", "attention_factor_1", "full_recompute"),
            "mistral_sw": ("window_minus_1", "window_plus_1"), "qwen2_sw": ("window_minus_1", "window_plus_1"),
            "mistral_lt": ("window_minus_1", "window_plus_1")}


def max_change(cfg, model, what, prompts, tokens, logits):
    if is_longrope(cfg):  # the reference's own decode order; full_recompute: the same model, one forward
        m = model if what == "full_recompute" else ablated(cfg, model, what)
        ab = (last_logits(m, prompts, tokens) if what == "full_recompute"
              else [cached_logits(m, p + t[:-1])[-1] for p, t in zip(prompts, tokens)])
        return round(max(float((a - torch.from_numpy(b)).abs().max()) for a, b in zip(ab, logits)), 4)
    ab = last_logits(ablated(cfg, model, what), prompts, tokens)
    return round(max(float((a - torch.from_numpy(b)).abs().max()) for a, b in zip(ab, logits)), 4)


def make(name, cfg, out_root, seed):
    model = hf_model(cfg)
    fill_weights(model, cfg, seed)
    tensors = published_tensors(model, cfg)
    moe = "num_experts" in cfg or "num_local_experts" in cfg or "n_routed_experts" in cfg
    glm = cfg["model_type"] in ("glm4_moe", "dots1")  # DeepSeek-V3's router
    gap = (GlmRouterGap(model) if glm else RouterGap(model, cfg["num_experts_per_tok"])) if moe else None
    rule = LongRopeRule(model, cfg["original_max_position_embeddings"]) if is_longrope(cfg) else None
    rng = np.random.default_rng(seed)
    prompts, tokens, logits, margins, rgaps = [], [], [], [], []
    lens, steps = LONG.get(name, (PROMPT_LENS, STEPS))
    tries, recompute_gap = 0, 0.0
    while len(prompts) < len(lens):
        n = lens[len(prompts)]
        p = [int(x) for x in rng.integers(0, cfg["vocab_size"], n)]
        if gap:
            gap.gap = float("inf")
        t, lg, mgn = (greedy_cached if rule or name in LONG else mg.greedy)(model, p, steps)
        tries += 1
        if mgn < MARGIN or (gap and gap.gap < (GLM_ROUTER_MARGIN if glm else ROUTER_MARGIN)):
            continue
        if name in LONG:  # the cache path against the sliding mask over the whole sequence
            t2, lg2, _ = mg.greedy(model, p, steps)
            assert t2 == t, (t, t2)
            recompute_gap = max(recompute_gap, float((lg2 - lg).abs().max()))
            assert recompute_gap < 1e-4, recompute_gap
        prompts.append(p)
        tokens.append(t)
        logits.append(lg.numpy().astype("<f4"))
        margins.append(mgn)
        if gap:
            rgaps.append(gap.gap)
    calls = list(rule.n) if rule else None  # rotary calls of the reference decodes (every prompt draw)
    out_dir = os.path.join(out_root, name)
    mg.save(out_dir, cfg, tensors, 1)
    np.concatenate(logits).tofile(os.path.join(out_dir, "logits.f32"))
    scale = float(max(np.abs(l).max() for l in logits))
    atol = round(0.02 + 0.03 * scale, 4)
    exp = {
        "prompts": prompts, "steps": steps, "tokens": tokens, "vocab_size": cfg["vocab_size"],
        "logits_file": "logits.f32", "logits_layout": "f32 little-endian [n_prompts, vocab_size]",
        "logits_atol": atol, "min_margin": round(min(margins), 4), "max_abs_logit": round(scale, 4),
    }
    if rgaps:
        exp["min_router_margin"] = round(min(rgaps), 4)
    family = name.split("_tied")[0].replace("glm4_moe", "glm4")
    if family in SENSITIVITY:
        what = SENSITIVITY[family]
        exp["sensitivity"] = {"removed": what, "max_abs_logit_change": max_change(cfg, model, what, prompts, tokens,
                                                                                logits)}
    if family in CONTROLS:
        exp["controls"] = {w: max_change(cfg, model, w, prompts, tokens, logits) for w in CONTROLS[family]}
    exp["generator"] = {"transformers": transformers.__version__, "torch": torch.__version__, "dtype": "float32",
                        "attention": "eager", "seed": seed, "prompt_draws": tries}
    if name in LONG:
        exp["generator"]["decode"] = "one token per forward through DynamicCache"
        exp["generator"]["max_abs_logit_gap_to_full_recompute"] = float(f"{recompute_gap:.3g}")
    if "layer_types" in cfg and cfg["model_type"] == "mistral":  # the saved config.json reads back as ministral
        assert transformers.AutoConfig.from_pretrained(out_dir).model_type == "ministral"
    if rule:
        # the saved config.json reads back as the model's RoPE; the rule held on every call, both kinds seen
        back = transformers.AutoConfig.from_pretrained(out_dir).rope_parameters
        assert all(back[k] == model.config.rope_parameters[k] for k in
                   ("rope_type", "short_factor", "long_factor", "original_max_position_embeddings",
                    "partial_rotary_factor", "rope_theta")), back
        assert calls[0] > 0 and calls[1] > 0, calls
        exp["generator"]["decode"] = "one token per forward with a KV cache, the prompt included"
        exp["generator"]["rotary_calls_short_long"] = calls
        re = model.model.rotary_emb  # transformers' own tables (f32 values, exact in JSON) and cos/sin factor
        exp["longrope"] = {"inv_freq_short": [float(x) for x in re.original_inv_freq],
                           "inv_freq_long": [float(x) for x in re.long_inv_freq],
                           "attention_scaling": re.attention_scaling}
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(exp, f, indent=1)
    extra = f" router margin {min(rgaps):.3f}" if rgaps else ""
    sens = f" sensitivity {exp['sensitivity']}" if "sensitivity" in exp else ""
    sens += f" controls {exp['controls']}" if "controls" in exp else ""
    print(f"{name}: prompts {prompts} tokens {tokens} min margin {min(margins):.3f}{extra} |logit| max {scale:.2f} "
          f"atol {atol} ({tries} prompt draws){sens}")


MODELS = [("llama", LLAMA, 11), ("qwen2", QWEN2, 12), ("qwen2_tied", QWEN2_TIED, 13), ("qwen3", QWEN3, 14),
          ("qwen3_moe", QWEN3_MOE, 15), ("mixtral", MIXTRAL, 16), ("qwen3_yarn", QWEN3_YARN, 17),
          ("mistral_nemo", MISTRAL_NEMO, 18), ("llama32_tied", LLAMA32_TIED, 19), ("glm4_moe", GLM4_MOE, 20),
          ("phi3", PHI3, 21), ("phi3_partial", PHI3_PARTIAL, 22), ("dots1", DOTS1, 23),
          ("phi3_longrope", PHI3_LONGROPE, 24), ("mistral_sw", MISTRAL_SW, 24),
          ("qwen2_sw", QWEN2_SW, 26), ("mistral_lt", MISTRAL_LT, 27)]  # qwen2_sw: seed 25's greedy tokens settle into one repeated token


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                                                  "golden"))
    ap.add_argument("--only", nargs="*", help="model names to regenerate (default: all)")
    a = ap.parse_args()
    for name, cfg, seed in MODELS:
        if not a.only or name in a.only:
            make(name, cfg, a.out, seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
