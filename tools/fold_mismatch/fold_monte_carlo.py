#!/usr/bin/env python3
"""How often a 16-column tensor-core sum with its weights folded by 2^k differs from the promoted sum times 2^k, under
tensor_core_model.py's unnormalized model (a subnormal f16 operand aligned with exponent -14), for random e2m1
weights decoded at 2^base and random e4m3 activations over their whole range (so the truncation bites). Decode bases:
-14 (the kernels' today: e2m1 0.5 is the subnormal 2^-15) and -13 (every e2m1 value f16-normal). Usage:
fold_monte_carlo.py [TRIALS]"""
import math
import random
import sys
from fractions import Fraction as Fr

E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def exponent(v):
    a = Fr(abs(v))
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e - 1 if Fr(2) ** e > a else e


def e4m3_random(rng):
    while True:
        c = rng.randrange(256)
        if c & 0x7F != 0x7F:
            s, e, m = -1 if c & 0x80 else 1, (c >> 3) & 15, c & 7
            return s * (m / 8 * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


def mma(ws, xs, bits=24):
    prods = [Fr(a) * Fr(b) for a, b in zip(ws, xs)]
    exps = [max(exponent(a), -14) + max(exponent(b), -14) + 1 for a, b, p in zip(ws, xs, prods) if p]
    if not exps:
        return Fr(0)
    q = Fr(2) ** (max(exps) - bits)
    return sum(math.floor(abs(p) / q) * q * (1 if p > 0 else -1) for p in prods)


def differs(rng, base, k):
    ws = [rng.choice((-1, 1)) * rng.choice(E2M1) * 2.0**base for _ in range(16)]
    xs = [e4m3_random(rng) for _ in range(16)]
    return mma([w * 2.0**k for w in ws], xs) != mma(ws, xs) * Fr(2) ** k


trials = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
rng = random.Random(7)
for base, ks in ((-14, (-9, -3, 1, 5, 15)), (-13, (0, 1, 5, 14))):
    for k in ks:
        print(f"decode 2^{base}, fold 2^{k}: {sum(differs(rng, base, k) for _ in range(trials))} of {trials} differ")
