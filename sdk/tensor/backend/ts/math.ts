/**
 * Scalar math the JS runtime lacks: erf (series near zero, continued
 * fraction for the tails, both accurate to ~1e-15), and the GELU forms.
 */

const TWO_OVER_SQRT_PI = 1.1283791670955126;
const INV_SQRT2 = 0.7071067811865476;
const INV_SQRT_2PI = 0.3989422804014327;
const SQRT_2_OVER_PI = 0.7978845608028654;

export function erf(x: number): number {
  if (Number.isNaN(x)) return x;
  const ax = Math.abs(x);
  if (ax < 2.5) {
    // Maclaurin series: erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
    const x2 = x * x;
    let term = x;
    let sum = x;
    for (let n = 1; n < 60; n++) {
      term *= -x2 / n;
      const add = term / (2 * n + 1);
      sum += add;
      if (Math.abs(add) < 1e-17 * Math.abs(sum)) break;
    }
    return TWO_OVER_SQRT_PI * sum;
  }
  if (ax > 6) return Math.sign(x);
  // erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...)))) by Lentz's method
  const tiny = 1e-300;
  let f = ax;
  let c = ax;
  let d = 0;
  for (let k = 1; k < 200; k++) {
    const a = k / 2;
    d = ax + a * d;
    d = d === 0 ? tiny : d;
    c = ax + a / c;
    c = c === 0 ? tiny : c;
    d = 1 / d;
    const delta = c * d;
    f *= delta;
    if (Math.abs(delta - 1) < 1e-16) break;
  }
  const erfc = Math.exp(-ax * ax) / (f * Math.sqrt(Math.PI));
  return Math.sign(x) * (1 - erfc);
}

export function gelu(x: number): number {
  return 0.5 * x * (1 + erf(x * INV_SQRT2));
}

export function geluGrad(x: number): number {
  return 0.5 * (1 + erf(x * INV_SQRT2)) + x * INV_SQRT_2PI * Math.exp(-0.5 * x * x);
}

export function geluTanh(x: number): number {
  return 0.5 * x * (1 + Math.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)));
}

export function geluTanhGrad(x: number): number {
  const inner = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
  const t = Math.tanh(inner);
  const dinner = SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * dinner;
}

export function sigmoid(x: number): number {
  return x >= 0 ? 1 / (1 + Math.exp(-x)) : Math.exp(x) / (1 + Math.exp(x));
}

/** Round half to even, as torch.round. */
export function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}
