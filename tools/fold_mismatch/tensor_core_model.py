#!/usr/bin/env python3
"""One output element of a routed-expert launch (NVFP4), summed as the kernels sum it under two models of the tensor
cores' f16 sums, with the block scales promoted (the warp-MMA kernel) and folded into the weights (the warpgroup
kernels' wide passes). Input: the file replay_case.cpp writes (the activation row as f32, the weight row's packed
nibbles, its e4m3 codes, the expert's global scale). Model "normalized": each product aligned by its true exponent,
every product truncated to F bits below the largest (scale-invariant, so folding never changes a bit). Model
"unnormalized": a subnormal f16 operand counts with exponent -14 (its field read as 1), so the truncation window
follows the operands' encodings. docs/perf.md, "An NVFP4 fold-edge case where the warpgroup kernel and the warp-MMA
kernel differ", says which model reproduced the two kernels' bits.
Usage: tensor_core_model.py element.bin [K]"""
import math
import struct
import sys
from fractions import Fraction as Fr

import numpy as np

path, K = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4096
raw = open(path, "rb").read()
x = np.frombuffer(raw[: 4 * K], dtype=np.float32).astype(np.float64)
w = np.frombuffer(raw[4 * K : 4 * K + K // 2], dtype=np.uint8)
codes = np.frombuffer(raw[4 * K + K // 2 : 4 * K + K // 2 + K // 16], dtype=np.uint8)
glob = struct.unpack("f", raw[-4:])[0]


def e4m3(c):
    s, e, m = -1.0 if c & 0x80 else 1.0, (c >> 3) & 15, c & 7
    return s * (m / 8 * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


POS = sorted({(e4m3(c), c) for c in range(128) if c != 0x7F})


def round_e4m3(v):  # nearest, ties to the even code
    a = abs(v)
    best = min(POS, key=lambda pc: (abs(pc[0] - a), pc[1] & 1))
    return math.copysign(best[0], v)


E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def nibble(i):  # low nibble = even column
    n = (int(w[i // 2]) >> 4) if i % 2 else (int(w[i // 2]) & 15)
    return (-1 if n & 8 else 1) * E2M1[n & 7]


def exponent(v):
    a = Fr(abs(v))
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e - 1 if Fr(2) ** e > a else e


def f32(v):  # round to nearest f32
    return float(np.float32(float(v))) if v == 0 else float(np.float32(float(Fr(v))))


def mma(ws, xs, bits, unnormalized):
    prods = [Fr(a) * Fr(b) for a, b in zip(ws, xs)]
    if unnormalized:
        exps = [max(exponent(a), -14) + max(exponent(b), -14) + 1 for a, b, p in zip(ws, xs, prods) if p]
    else:
        exps = [exponent(p) for p in prods if p]
    if not exps:
        return 0.0
    q = Fr(2) ** (max(exps) - bits)
    return f32(sum(math.floor(abs(p) / q) * q * (1 if p > 0 else -1) for p in prods))


def output(folded, bits, unnormalized):
    parts = [0.0, 0.0]  # the two K parts: 32-column blocks by parity, added at the end
    for b in range(0, K, 128):
        amax = float(np.max(np.abs(x[b : b + 128])))
        s = 2.0 ** math.ceil(math.log2(float(np.float32(max(amax, 1e-4)) * np.float32(1 / 448))))
        for h in range(b // 16, b // 16 + 8):
            ws = e4m3(int(codes[h])) * glob * 2**14  # the weight scale times 2^14, a power of two here
            wdec = [nibble(i) * 2.0**-14 for i in range(16 * h, 16 * h + 16)]
            xs = [round_e4m3(float(np.float32(x[i] / s))) for i in range(16 * h, 16 * h + 16)]
            if folded:
                acc, factor = mma([v * ws for v in wdec], xs, bits, unnormalized), s
            else:
                acc, factor = mma(wdec, xs, bits, unnormalized), f32(Fr(s) * Fr(ws))
            p = (h // 2) % 2
            parts[p] = f32(Fr(acc) * Fr(factor) + Fr(parts[p]))
    return f32(Fr(parts[0]) + Fr(parts[1]))


def bf16(v):
    u = struct.unpack("I", struct.pack("f", v))[0]
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16


for unnormalized in (False, True):
    for bits in (24, 25, 26):  # 26: the width TensorCoreSum measured (window_fit.py)
        a, b = output(False, bits, unnormalized), output(True, bits, unnormalized)
        print(f"{'unnormalized' if unnormalized else 'normalized  '} F={bits}: promoted {a!r} (bf16 0x{bf16(a):04x}), "
              f"folded {b!r} (bf16 0x{bf16(b):04x}){'' if a == b else '  DIFFER'}")
