#!/usr/bin/env python3
"""Which model of the tensor cores' f16 sums gives the fold-mismatch rates TensorCoreSum measured on an H100
(tests/gpu/tensor_core_sum_test.cu: one mma.sync m16n8k16, random e2m1 weights at e2m1 x 2^-14, random e4m3
activations over their whole range; the weights times 2^k in f16 against the sum times 2^k: 34.3 % of sums differ at
k = -9, 12.1 % at k = -8, none from -7 to 15). The model: each product's top exponent read from the operands' f16
exponent fields (a subnormal counts as 2^-14) plus one, every product truncated toward zero to a multiple of
2^(top - F) for the largest top, the truncated products summed exactly, rounded to f32. Prints the rate for each F
and k; F = 26 gives the hardware's (docs/perf.md, "The scale fold's premise on the tensor cores: outcome";
kernels/cuda/moe_gemm/scale_fold.h). Usage: window_fit.py [samples] [F ...]"""
import sys

import numpy as np

samples = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
windows = [int(a) for a in sys.argv[2:]] or [24, 25, 26, 27]
rng = np.random.default_rng(1)

# Activations: random bytes as e4m3 (NaN codes to their neighbour, as the test), as significand x 2^lsb.
code = rng.integers(0, 256, size=(samples, 16))
code = np.where((code & 0x7F) == 0x7F, code ^ 1, code)
a_sign = np.where(code & 0x80, -1, 1)
a_exp_field, a_man = (code >> 3) & 15, code & 7
a_sig = np.where(a_exp_field == 0, a_man, 8 + a_man)
a_lsb = np.where(a_exp_field == 0, -9, a_exp_field - 10)
a_top = np.where(a_exp_field == 0, np.floor(np.log2(np.maximum(a_man, 1))).astype(int) - 9, a_exp_field - 7)

# Weights: random nibbles, value (2 x e2m1) x 2^(k - 15).
nibble = rng.integers(0, 16, size=(samples, 16))
w_sign = np.where(nibble & 8, -1, 1)
w_twice = np.array([0, 1, 2, 3, 4, 6, 8, 12])[nibble & 7]
w_top_at_0 = np.floor(np.log2(np.maximum(w_twice, 1))).astype(int) - 15

UNIT = 64  # sums in units of 2^-UNIT, exact in Python integers
prod_sig = (a_sign * w_sign * a_sig * w_twice).astype(object)


def sums(k, window):
    lsb = a_lsb + k - 15 + UNIT
    products = prod_sig * np.vectorize(lambda e: 1 << int(e), otypes=[object])(lsb)
    top = np.where(w_twice * a_sig != 0, np.maximum(w_top_at_0 + k, -14) + a_top + 1, -999)
    quantum = np.vectorize(lambda e: 1 << int(max(e, 0)), otypes=[object])(top.max(axis=1) - window + UNIT)
    truncated = [sum((abs(p) // q) * q * (1 if p > 0 else -1) for p in row) for row, q in zip(products, quantum)]
    return np.array([np.float32(float(v) * 2.0**-UNIT) for v in truncated], dtype=np.float32)


for window in windows:
    promoted = sums(0, window)
    for k in (-9, -8, -7, -6, -3, 1, 5, 15):
        folded = sums(k, window)
        differ = np.count_nonzero(promoted * np.float32(2.0**k) != folded)
        print(f"F = {window}, k = {k:3d}: {100 * differ / samples:6.2f} % of {samples} sums differ", flush=True)
