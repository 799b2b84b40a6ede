"""Fits the polynomial coefficients used by ../vmath_body.inc (float32 vector math).

Near-minimax fits by iteratively reweighted least squares (Lawson) on Chebyshev
nodes against mpmath at 40 digits, rounded to float32. Run with python3 (needs
numpy and mpmath); prints the C arrays pasted into vmath_body.inc and the fit error.
"""
import mpmath as mp
import numpy as np

mp.mp.dps = 40


def fit(f, a, b, deg, var=lambda x: x, rel=True, n=2000):
    k = np.arange(n)
    x = (a + b) / 2 + (b - a) / 2 * np.cos(np.pi * (k + 0.5) / n)
    y = np.array([float(f(mp.mpf(xi))) for xi in x])
    A = np.vander(var(x), deg + 1, increasing=True)
    w = np.ones(n)
    sc = 1 / np.abs(y) if rel else np.ones(n)
    for _ in range(60):
        W = np.sqrt(w) * sc
        c, *_ = np.linalg.lstsq(A * W[:, None], y * W, rcond=None)
        e = np.abs((A @ c - y) * sc)
        w = w * e
        w /= w.sum()
    c32 = c.astype(np.float32)
    return c32, np.max(np.abs((A @ c32.astype(np.float64) - y) * sc))


def show(name, what, c, err):
    body = ", ".join(f"{float(v):.9g}f" for v in c)
    print(f"// {what}; max {'rel' if name != 'kLogP' else 'abs'} error of the fit {err:.2e}")
    print(f"constexpr float {name}[{len(c)}] = {{{body}}};")


ln2 = np.log(2)
show("kExpP", "e^r = 1 + r + r^2 P(r), |r| <= ln2/2",
     *fit(lambda r: (mp.exp(r) - 1 - r) / r**2, -ln2 / 2, ln2 / 2, 5))
show("kLogP", "log(1+f) = f - f^2/2 + f^3 P(f), f in [sqrt(1/2)-1, sqrt(2)-1]",
     *fit(lambda f: (mp.log(1 + f) - f + f**2 / 2) / f**3, np.sqrt(0.5) - 1, np.sqrt(2) - 1, 8, rel=False))
show("kTanhP", "tanh(x) = x + x^3 P(x^2), |x| <= 0.625",
     *fit(lambda x: (mp.tanh(x) - x) / x**3, 1e-6, 0.625, 4, var=lambda x: x * x))
show("kErfP", "erf(x) = x P(x^2), |x| <= 1",
     *fit(lambda x: mp.erf(x) / x, 1e-6, 1.0, 5, var=lambda x: x * x))
show("kErfcR", "erfc(x) = exp(-x^2) R(t), t = 1/(1+x/2), x in [0.5, 10.1]",
     *fit(lambda x: mp.erfc(x) * mp.exp(x * x), 0.5, 10.1, 8, var=lambda x: 1 / (1 + 0.5 * x)))
