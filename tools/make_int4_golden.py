#!/usr/bin/env python3
"""Writes tests/data/int4/golden.safetensors: one compressed-tensors pack-quantized INT4 weight
(symmetric, strategy "group", group_size 32) made by the compressed-tensors package itself, and its
dequantised values, so that tests/test_quant.c can check prezero's unpacking and dequantisation
bit for bit against another implementation. Run once; the product and its tests need none of this.

  python3 -m venv /tmp/ct && /tmp/ct/bin/pip install torch compressed-tensors safetensors
  /tmp/ct/bin/python tools/make_int4_golden.py [OUT]

Tensors (row-major, [out, in] = [24, 256]):
  weight        bf16 [24, 256]  the seeded source weight (torch.manual_seed(15), randn * 0.02,
                                 rows 0-3 scaled to give large / tiny / mixed groups)
  weight_packed i32  [24, 32]   compressed_tensors pack_to_int32(quantize(weight), 4)
  weight_scale  bf16 [24, 8]    calculate_qparams over each group of 32 columns (bf16, as in a checkpoint)
  weight_shape  i64  [2]        [24, 256]
  q             i8   [24, 256]  unpack_from_int32(weight_packed): the signed 4-bit values
  dequant_f32   f32  [24, 256]  dequantize(q, scale as f32): int4 x scale in f32 (exact)
  dequant_bf16  bf16 [24, 256]  dequantize(q, scale): compressed-tensors' default (product in bf16)
"""
import sys

import torch
from safetensors.torch import save_file
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32, unpack_from_int32
from compressed_tensors.quantization import QuantizationArgs
from compressed_tensors.quantization.lifecycle.forward import dequantize, quantize
from compressed_tensors.quantization.utils import calculate_qparams


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/int4/golden.safetensors"
    rows, cols, group = 24, 256, 32
    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=group)
    torch.manual_seed(15)
    w = torch.randn(rows, cols) * 0.02
    w[0] *= 100.0            # large values
    w[1] *= 1e-3             # tiny scales (subnormal-free bf16)
    w[2, :group] = 0.0       # an all-zero group: scale becomes eps
    w[3, ::2] = -w[3, ::2].abs().max()  # ties to the clamp at -8
    w = w.to(torch.bfloat16)
    g = w.float().view(rows, cols // group, group)
    scale, zp = calculate_qparams(g.amin(dim=2), g.amax(dim=2), args)
    scale = scale.to(torch.bfloat16)
    zp = zp.to(torch.int8)
    q = quantize(w, scale, zp, args, dtype=torch.int8)
    packed = pack_to_int32(q, 4)
    unpacked = unpack_from_int32(packed, 4, torch.Size([rows, cols]))
    assert torch.equal(unpacked, q)
    dq_f32 = dequantize(unpacked, scale.float(), None, args, dtype=torch.float32)
    dq_bf16 = dequantize(unpacked, scale, None, args)
    save_file({
        "weight": w.contiguous(),
        "weight_packed": packed.contiguous(),
        "weight_scale": scale.contiguous(),
        "weight_shape": torch.tensor([rows, cols], dtype=torch.int64),
        "q": q.contiguous(),
        "dequant_f32": dq_f32.contiguous(),
        "dequant_bf16": dq_bf16.contiguous(),
    }, out, metadata={"tool": "tools/make_int4_golden.py", "compressed_tensors": __import__("compressed_tensors").__version__,
                      "torch": torch.__version__})
    print(f"wrote {out}: packed {tuple(packed.shape)} {packed.dtype}, scale {tuple(scale.shape)} {scale.dtype}")


if __name__ == "__main__":
    main()
