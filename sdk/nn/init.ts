/**
 * Parameter initialisation, as torch.nn.init: each function fills a tensor
 * in place without recording gradients and returns it. Random fills draw from
 * the global generator (seed it with manualSeed) or from `generator`.
 *
 *   init.kaimingUniform_(linear.weight, { a: Math.sqrt(5) }); // Linear's default
 *   init.normal_(emb.weight, 0, 0.02);
 *
 * Modes and nonlinearities take PyTorch's strings ("fan_in", "leaky_relu");
 * the camelCase spellings ("fanIn", "leakyRelu") are accepted too.
 */
import { ValueError } from "../errors/index.js";
import { noGrad } from "../autograd/grad_mode.js";
import type { Generator } from "../tensor/random.js";
import type { Tensor } from "../tensor/tensor.js";

export type FanMode = "fan_in" | "fan_out" | "fanIn" | "fanOut";
export type Nonlinearity =
  "linear" | "conv1d" | "conv2d" | "conv3d" | "sigmoid" | "tanh" | "relu" | "leaky_relu" | "leakyRelu" | "selu";

export interface KaimingOptions {
  /** Negative slope of the leaky ReLU that follows (0 for ReLU). */
  a?: number;
  mode?: FanMode;
  nonlinearity?: Nonlinearity;
  generator?: Generator;
}

/** The recommended gain for a nonlinearity, as torch.nn.init.calculate_gain. */
export function calculateGain(nonlinearity: Nonlinearity, param?: number): number {
  switch (nonlinearity) {
    case "linear":
    case "conv1d":
    case "conv2d":
    case "conv3d":
    case "sigmoid":
      return 1;
    case "tanh":
      return 5 / 3;
    case "relu":
      return Math.SQRT2;
    case "leaky_relu":
    case "leakyRelu": {
      const slope = param ?? 0.01;
      if (typeof slope !== "number" || !Number.isFinite(slope))
        throw new ValueError(`negative_slope ${slope} not a valid number`);
      return Math.sqrt(2 / (1 + slope * slope));
    }
    case "selu":
      return 3 / 4;
    default:
      throw new ValueError(`Unsupported nonlinearity ${String(nonlinearity)}`);
  }
}

/** [fanIn, fanOut] of a weight of shape [out, in, ...kernel], as torch's _calculate_fan_in_and_fan_out. */
export function calculateFanInAndFanOut(t: Tensor): [number, number] {
  if (t.ndim < 2)
    throw new ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions");
  const receptive = t.shape.slice(2).reduce((p, d) => p * d, 1);
  return [t.shape[1]! * receptive, t.shape[0]! * receptive];
}

function fan(t: Tensor, mode: FanMode): number {
  const [fanIn, fanOut] = calculateFanInAndFanOut(t);
  if (mode === "fan_in" || mode === "fanIn") return fanIn;
  if (mode === "fan_out" || mode === "fanOut") return fanOut;
  throw new ValueError(`Mode ${String(mode)} not supported, please use one of fan_in, fan_out`);
}

/** Fills with U(a, b). */
export function uniform_(t: Tensor, a = 0, b = 1, generator?: Generator): Tensor {
  return noGrad(() => t.uniform_(a, b, generator));
}

/** Fills with N(mean, std²). */
export function normal_(t: Tensor, mean = 0, std = 1, generator?: Generator): Tensor {
  return noGrad(() => t.normal_(mean, std, generator));
}

export function constant_(t: Tensor, value: number): Tensor {
  return noGrad(() => t.fill_(value));
}

export function zeros_(t: Tensor): Tensor {
  return constant_(t, 0);
}

export function ones_(t: Tensor): Tensor {
  return constant_(t, 1);
}

/** Glorot uniform: U(-a, a) with a = gain * sqrt(6 / (fanIn + fanOut)). */
export function xavierUniform_(t: Tensor, gain = 1, generator?: Generator): Tensor {
  const [fanIn, fanOut] = calculateFanInAndFanOut(t);
  const a = Math.sqrt(3) * gain * Math.sqrt(2 / (fanIn + fanOut));
  return uniform_(t, -a, a, generator);
}

/** Glorot normal: N(0, std²) with std = gain * sqrt(2 / (fanIn + fanOut)). */
export function xavierNormal_(t: Tensor, gain = 1, generator?: Generator): Tensor {
  const [fanIn, fanOut] = calculateFanInAndFanOut(t);
  return normal_(t, 0, gain * Math.sqrt(2 / (fanIn + fanOut)), generator);
}

/** He uniform: U(-b, b) with b = gain * sqrt(3 / fan); Linear uses a = sqrt(5), giving b = 1/sqrt(fanIn). */
export function kaimingUniform_(t: Tensor, opts: KaimingOptions = {}): Tensor {
  const std = calculateGain(opts.nonlinearity ?? "leaky_relu", opts.a ?? 0) / Math.sqrt(fan(t, opts.mode ?? "fan_in"));
  const bound = Math.sqrt(3) * std;
  return uniform_(t, -bound, bound, opts.generator);
}

/** He normal: N(0, std²) with std = gain / sqrt(fan). */
export function kaimingNormal_(t: Tensor, opts: KaimingOptions = {}): Tensor {
  const std = calculateGain(opts.nonlinearity ?? "leaky_relu", opts.a ?? 0) / Math.sqrt(fan(t, opts.mode ?? "fan_in"));
  return normal_(t, 0, std, opts.generator);
}
