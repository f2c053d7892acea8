#!/usr/bin/env python3
"""Reproduces the polynomial coefficients used by src/numerics (tanh, erf).

Plain Python (no numpy): near-minimax fits by Lawson's iteratively reweighted least squares on
Chebyshev nodes, solved in double precision, then rounded to f32. The Rust tests measure the final
error of the f32 evaluation; this script only has to produce good coefficients.
Run: python3 src/numerics/fit_coeffs.py
"""
import math
import struct


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def f32hex(v):
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", v))[0]


def solve(a, b):
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                for k in range(c, n + 1):
                    m[r][k] -= f * m[c][k]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit(func, lo, hi, deg, weight=lambda t: 1.0, npts=400, iters=40):
    ts = [lo + (hi - lo) * (1 - math.cos(math.pi * (i + 0.5) / npts)) / 2 for i in range(npts)]
    ys = [func(t) for t in ts]
    ws = [1.0] * npts
    for _ in range(iters):
        ata = [[0.0] * (deg + 1) for _ in range(deg + 1)]
        aty = [0.0] * (deg + 1)
        for t, y, w in zip(ts, ys, ws):
            s = w * weight(t) ** 2
            pw = [t ** k for k in range(deg + 1)]
            for i in range(deg + 1):
                aty[i] += s * pw[i] * y
                for j in range(deg + 1):
                    ata[i][j] += s * pw[i] * pw[j]
        c = solve(ata, aty)
        errs = [abs(sum(ck * t ** k for k, ck in enumerate(c)) - y) * weight(t) for t, y in zip(ts, ys)]
        tot = sum(w * e for w, e in zip(ws, errs))
        ws = [w * e / tot for w, e in zip(ws, errs)]
    return c, max(errs)


def show(name, c, err):
    print("%s: max weighted err %.3g" % (name, err))
    for k, ck in enumerate(c):
        print("  c%d = %.9e  (%s)" % (k, f32(ck), f32hex(ck)))


if __name__ == "__main__":
    # tanh(x) = x + x^3 * g(x^2) for |x| < 0.55; g fitted in u = x^2; weight u (relative error of tanh ~ u*|dg|).
    def g(u):
        if u == 0:
            return -1.0 / 3.0
        x = math.sqrt(u)
        return (math.tanh(x) - x) / (x * u)

    c, e = fit(g, 0.0, 0.3025, 5, weight=lambda u: u + 1e-30)
    show("tanh g(u), u in [0, 0.3025]", c, e)

    # erf(x) = x + x * p(x^2) for |x| < 0.875; p fitted in u = x^2; relative weight.
    def p(u):
        if u == 0:
            return 2 / math.sqrt(math.pi) - 1
        x = math.sqrt(u)
        return math.erf(x) / x - 1

    c, e = fit(p, 0.0, 0.875 ** 2, 6)
    show("erf p(u), u in [0, 0.765625]", c, e)

    # erf(x) = 1 - q_i(x - mid_i) on pieces of [0.875, 3.875]; absolute error (erf ~ 1 there).
    pieces = [(0.875, 1.375), (1.375, 2.0), (2.0, 2.75), (2.75, 3.875)]
    for lo, hi in pieces:
        mid = (lo + hi) / 2
        c, e = fit(lambda t: math.erfc(t + mid), lo - mid, hi - mid, 8)
        show("erfc piece [%g, %g], t = x - %g" % (lo, hi, mid), c, e)


def shortest(v):
    """Shortest decimal that rounds back to the same f32 (what Rust's `{:?}` prints)."""
    v = f32(v)
    for p in range(1, 12):
        s = "%.*e" % (p - 1, v)
        if f32(float(s)) == v:
            m, e = s.split("e")
            return "%se%d" % (m, int(e))
    raise ValueError(v)
