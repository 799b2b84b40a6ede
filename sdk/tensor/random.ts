/**
 * The seeded random generator: MT19937 (the same core PyTorch's CPU generator
 * uses), so `manualSeed(s)` makes every creation op deterministic. Streams are
 * tprpc's own: the same seed does not reproduce torch's exact numbers, so
 * parity tests carry their inputs in fixtures.
 */

export class Generator {
  private mt = new Uint32Array(624);
  private idx = 625;
  private spareNormal: number | null = null;
  private seedValue = 0;

  constructor(seed = 5489) {
    this.manualSeed(seed);
  }

  manualSeed(seed: number): this {
    this.seedValue = seed;
    const mt = this.mt;
    mt[0] = seed >>> 0;
    for (let i = 1; i < 624; i++) {
      const prev = mt[i - 1]! ^ (mt[i - 1]! >>> 30);
      mt[i] = (Math.imul(1812433253, prev) + i) >>> 0;
    }
    this.idx = 624;
    this.spareNormal = null;
    return this;
  }

  initialSeed(): number {
    return this.seedValue;
  }

  /** A uniform 32-bit unsigned integer. */
  nextU32(): number {
    const mt = this.mt;
    if (this.idx >= 624) {
      for (let i = 0; i < 624; i++) {
        const y = (mt[i]! & 0x80000000) | (mt[(i + 1) % 624]! & 0x7fffffff);
        let v = mt[(i + 397) % 624]! ^ (y >>> 1);
        if (y & 1) v ^= 0x9908b0df;
        mt[i] = v >>> 0;
      }
      this.idx = 0;
    }
    let y = mt[this.idx++]!;
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c5680;
    y ^= (y << 15) & 0xefc60000;
    y ^= y >>> 18;
    return y >>> 0;
  }

  /** Uniform in [0, 1) with 53 random bits. */
  random(): number {
    const a = this.nextU32() >>> 5;
    const b = this.nextU32() >>> 6;
    return (a * 67108864 + b) / 9007199254740992;
  }

  /** Standard normal by the Box-Muller transform (pairs cached). */
  normal(): number {
    if (this.spareNormal !== null) {
      const s = this.spareNormal;
      this.spareNormal = null;
      return s;
    }
    let u = this.random();
    while (u === 0) u = this.random();
    const v = this.random();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spareNormal = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }

  /** Uniform integer in [low, high). */
  randint(low: number, high: number): number {
    return low + Math.floor(this.random() * (high - low));
  }
}

export const defaultGenerator = new Generator();

/** Seeds the default generator, as torch.manual_seed. */
export function manualSeed(seed: number): Generator {
  return defaultGenerator.manualSeed(seed);
}
