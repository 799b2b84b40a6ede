/**
 * Float64 re-derivations of torch 1.13's optimizer update rules, written
 * element by element on plain number arrays straight from the algorithms in
 * torch/optim/*.py (single-tensor paths). The optimizer tests run tprpc's
 * optimizers on float64 tensors and compare with these.
 */

export type Vec = number[];
/** Per-parameter state of a reference optimizer: named buffers and the step count. */
export interface RefState {
  step: number;
  bufs: Record<string, Vec>;
}

export type RefRule = (p: Vec, g: Vec, s: RefState) => void;

const buf = (s: RefState, name: string, like: Vec, init = 0): Vec => (s.bufs[name] ??= like.map(() => init));

export function sgdRule(h: {
  lr: number;
  momentum?: number;
  dampening?: number;
  weightDecay?: number;
  nesterov?: boolean;
  maximize?: boolean;
}): RefRule {
  const { lr, momentum = 0, dampening = 0, weightDecay = 0, nesterov = false, maximize = false } = h;
  return (p, g, s) => {
    const first = s.bufs.momentum === undefined;
    const b = buf(s, "momentum", p);
    for (let i = 0; i < p.length; i++) {
      let d = maximize ? -g[i]! : g[i]!;
      d += weightDecay * p[i]!;
      if (momentum !== 0) {
        b[i] = first ? d : b[i]! * momentum + (1 - dampening) * d;
        d = nesterov ? d + momentum * b[i]! : b[i]!;
      }
      p[i] = p[i]! - lr * d;
    }
  };
}

export interface AdamRef {
  lr?: number;
  betas?: [number, number];
  eps?: number;
  weightDecay?: number;
  amsgrad?: boolean;
  maximize?: boolean;
}

function adamLike(h: AdamRef, decoupled: boolean): RefRule {
  const { lr = 1e-3, betas = [0.9, 0.999], eps = 1e-8, amsgrad = false, maximize = false } = h;
  const weightDecay = h.weightDecay ?? (decoupled ? 1e-2 : 0);
  const [b1, b2] = betas;
  return (p, g, s) => {
    s.step += 1;
    const t = s.step;
    const m = buf(s, "m", p);
    const v = buf(s, "v", p);
    const vmax = buf(s, "vmax", p);
    const bc1 = 1 - b1 ** t;
    const bc2 = 1 - b2 ** t;
    for (let i = 0; i < p.length; i++) {
      let gi = maximize ? -g[i]! : g[i]!;
      if (decoupled) p[i] = p[i]! * (1 - lr * weightDecay);
      else gi += weightDecay * p[i]!;
      m[i] = m[i]! * b1 + (1 - b1) * gi;
      v[i] = v[i]! * b2 + (1 - b2) * gi * gi;
      vmax[i] = Math.max(vmax[i]!, v[i]!);
      const denom = Math.sqrt(amsgrad ? vmax[i]! : v[i]!) / Math.sqrt(bc2) + eps;
      p[i] = p[i]! - (lr / bc1) * (m[i]! / denom);
    }
  };
}

export const adamRule = (h: AdamRef): RefRule => adamLike(h, false);
export const adamwRule = (h: AdamRef): RefRule => adamLike(h, true);

export function adagradRule(h: {
  lr?: number;
  lrDecay?: number;
  weightDecay?: number;
  initialAccumulatorValue?: number;
  eps?: number;
}): RefRule {
  const { lr = 1e-2, lrDecay = 0, weightDecay = 0, initialAccumulatorValue = 0, eps = 1e-10 } = h;
  return (p, g, s) => {
    s.step += 1;
    const sum = buf(s, "sum", p, initialAccumulatorValue);
    const clr = lr / (1 + (s.step - 1) * lrDecay);
    for (let i = 0; i < p.length; i++) {
      const gi = g[i]! + weightDecay * p[i]!;
      sum[i] = sum[i]! + gi * gi;
      p[i] = p[i]! - (clr * gi) / (Math.sqrt(sum[i]!) + eps);
    }
  };
}

export function rmspropRule(h: {
  lr?: number;
  alpha?: number;
  eps?: number;
  weightDecay?: number;
  momentum?: number;
  centered?: boolean;
}): RefRule {
  const { lr = 1e-2, alpha = 0.99, eps = 1e-8, weightDecay = 0, momentum = 0, centered = false } = h;
  return (p, g, s) => {
    const sq = buf(s, "sq", p);
    const ga = buf(s, "ga", p);
    const mb = buf(s, "mb", p);
    for (let i = 0; i < p.length; i++) {
      const gi = g[i]! + weightDecay * p[i]!;
      sq[i] = alpha * sq[i]! + (1 - alpha) * gi * gi;
      ga[i] = alpha * ga[i]! + (1 - alpha) * gi;
      const avg = Math.sqrt(centered ? sq[i]! - ga[i]! * ga[i]! : sq[i]!) + eps;
      if (momentum > 0) {
        mb[i] = momentum * mb[i]! + gi / avg;
        p[i] = p[i]! - lr * mb[i]!;
      } else p[i] = p[i]! - (lr * gi) / avg;
    }
  };
}

export function adadeltaRule(h: {
  lr?: number;
  rho?: number;
  eps?: number;
  weightDecay?: number;
  maximize?: boolean;
}): RefRule {
  const { lr = 1, rho = 0.9, eps = 1e-6, weightDecay = 0, maximize = false } = h;
  return (p, g, s) => {
    const v = buf(s, "v", p);
    const u = buf(s, "u", p);
    for (let i = 0; i < p.length; i++) {
      const gi = (maximize ? -g[i]! : g[i]!) + weightDecay * p[i]!;
      v[i] = rho * v[i]! + (1 - rho) * gi * gi;
      const delta = (Math.sqrt(u[i]! + eps) / Math.sqrt(v[i]! + eps)) * gi;
      u[i] = rho * u[i]! + (1 - rho) * delta * delta;
      p[i] = p[i]! - lr * delta;
    }
  };
}

export function adamaxRule(h: {
  lr?: number;
  betas?: [number, number];
  eps?: number;
  weightDecay?: number;
  maximize?: boolean;
}): RefRule {
  const { lr = 2e-3, betas = [0.9, 0.999], eps = 1e-8, weightDecay = 0, maximize = false } = h;
  const [b1, b2] = betas;
  return (p, g, s) => {
    s.step += 1;
    const m = buf(s, "m", p);
    const u = buf(s, "u", p);
    const clr = lr / (1 - b1 ** s.step);
    for (let i = 0; i < p.length; i++) {
      const gi = (maximize ? -g[i]! : g[i]!) + weightDecay * p[i]!;
      m[i] = b1 * m[i]! + (1 - b1) * gi;
      u[i] = Math.max(b2 * u[i]!, Math.abs(gi) + eps);
      p[i] = p[i]! - (clr * m[i]!) / u[i]!;
    }
  };
}

export function rpropRule(h: {
  lr?: number;
  etas?: [number, number];
  stepSizes?: [number, number];
  maximize?: boolean;
}): RefRule {
  const { lr = 1e-2, etas = [0.5, 1.2], stepSizes = [1e-6, 50], maximize = false } = h;
  const [etaminus, etaplus] = etas;
  const [lo, hi] = stepSizes;
  return (p, g, s) => {
    const prev = buf(s, "prev", p);
    const size = buf(s, "size", p, lr);
    for (let i = 0; i < p.length; i++) {
      let gi = maximize ? -g[i]! : g[i]!;
      const agree = gi * prev[i]!;
      const f = agree > 0 ? etaplus : agree < 0 ? etaminus : 1;
      size[i] = Math.min(Math.max(size[i]! * f, lo), hi);
      if (agree < 0) gi = 0;
      p[i] = p[i]! - Math.sign(gi) * size[i]!;
      prev[i] = gi;
    }
  };
}

/**
 * Runs `rule` from `params` over grads[step][param]; returns the parameters
 * after each step (copies).
 */
export function runReference(rule: RefRule, params: Vec[], grads: Vec[][]): Vec[][] {
  const ps = params.map((p) => [...p]);
  const states: RefState[] = ps.map(() => ({ step: 0, bufs: {} }));
  return grads.map((gs) => {
    for (const [i, p] of ps.entries()) rule(p, gs[i]!, states[i]!);
    return ps.map((p) => [...p]);
  });
}
