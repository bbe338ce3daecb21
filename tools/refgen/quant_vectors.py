#!/usr/bin/env python3
"""Expected outputs for tests/kernels/{quant_sim,rope}_test.cpp, worked out by a different route than the C++:

* FP8 / FP4 round trips: scale 2^ceil(log2(amax / qmax)) via float64 log2 (not exponent bits), element
  rounding by ml_dtypes' float8_e4m3fn / float4_e2m1fn casts (not dsv4's round_to_format).
* Hadamard: an explicit Sylvester matrix built with np.kron, product in float64, then rounded to float32.
* RoPE / YaRN: inverse frequencies and the correction range in float64 from the spec §6 formula, then float32.

Inputs come from a formula both sides evaluate exactly (integers times powers of two, all bf16-representable):
    x[i] = ((31 i^2 + 7919 i + 11) % 257 - 128) * 2^(e_block - 6),  e_block = exponents[i // block]
Run: python3 tools/refgen/quant_vectors.py   (needs numpy and ml_dtypes); paste the printed arrays into the tests.
"""
import math

import ml_dtypes
import numpy as np


def formula_input(n, block, exponents):
    i = np.arange(n)
    e = np.array([exponents[k // block] for k in i], dtype=np.float64)
    return (((31 * i * i + 7919 * i + 11) % 257) - 128).astype(np.float64) * np.exp2(e - 6)


def round_trip(x, block, qmax, floor, qdtype):
    out = np.empty_like(x)
    for b in range(0, len(x), block):
        blk = x[b:b + block]
        amax = max(np.abs(blk).max(), floor)
        s = 2.0 ** math.ceil(math.log2(amax / qmax))
        q = np.clip(blk / s, -qmax, qmax).astype(qdtype).astype(np.float64)
        out[b:b + block] = q * s
    return out.astype(np.float32)


def hadamard(x):
    h = np.array([[1.0]])
    while h.shape[0] < len(x):
        h = np.kron(np.array([[1.0, 1.0], [1.0, -1.0]]), h)
    return (h @ x / math.sqrt(len(x))).astype(np.float32)


def yarn_inv_freq(rope_dim, theta, factor, orig, beta_fast, beta_slow):
    half = rope_dim // 2
    w = np.array([theta ** (-2.0 * i / rope_dim) for i in range(half)])
    corr = lambda rot: rope_dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))
    low = max(math.floor(corr(beta_fast)), 0)
    high = min(math.ceil(corr(beta_slow)), rope_dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(half) - low) / (high - low), 0.0, 1.0)
    return low, high, (w / factor * ramp + w * (1.0 - ramp)).astype(np.float32)


def show(name, values):
    body = ", ".join("%.9g" % v for v in values)
    print(f"// {name} [{len(values)}]\n{{{body}}}\n")


if __name__ == "__main__":
    x = formula_input(192, 64, [0, -10, -20])
    show("fp8_round_trip, block 64, exponents {0, -10, -20}", round_trip(x, 64, 448.0, 1e-4, ml_dtypes.float8_e4m3fn))
    x = formula_input(128, 32, [0, 3, -5, -126])
    show("fp4_round_trip, block 32, exponents {0, 3, -5, -126}",
         round_trip(x, 32, 6.0, 6 * 2.0 ** -126, ml_dtypes.float4_e2m1fn))
    x = formula_input(128, 128, [0])
    show("hadamard_transform, n 128, exponent 0", hadamard(x))
    plain = np.array([10000.0 ** (-2.0 * i / 64) for i in range(32)]).astype(np.float32)
    show("inv_freq theta 10000, rope_dim 64", plain)
    low, high, yarn = yarn_inv_freq(64, 160000.0, 16.0, 65536, 32.0, 1.0)
    print(f"// YaRN theta 160000 factor 16 orig 65536 beta 32/1: low {low} high {high}")
    show("inv_freq theta 160000 YaRN", yarn)
    low, high, yarn = yarn_inv_freq(16, 160000.0, 4.0, 64, 32.0, 1.0)
    print(f"// YaRN rope_dim 16 theta 160000 factor 4 orig 64 beta 32/1 (tiny test config): low {low} high {high}")
    show("inv_freq tiny YaRN", yarn)
    low, high, yarn = yarn_inv_freq(64, 10000.0, 16.0, 6, 32.0, 1.0)
    print(f"// YaRN rope_dim 64 theta 10000 factor 16 orig 6 (degenerate: low == high): low {low} high {high}")
    show("inv_freq degenerate YaRN", yarn)
