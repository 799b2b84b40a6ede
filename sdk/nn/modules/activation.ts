/**
 * Activation modules (no parameters): ReLU, GELU, Tanh, Sigmoid, SiLU,
 * Softmax and LogSoftmax, as their torch.nn namesakes; each forwards to
 * nn.functional.
 */
import type { Tensor } from "../../tensor/tensor.js";
import * as F from "../functional.js";
import { Module } from "../module.js";

export class ReLU extends Module<[Tensor], Tensor> {
  forward(input: Tensor): Tensor {
    return F.relu(input);
  }
}

export class GELU extends Module<[Tensor], Tensor> {
  readonly approximate: "none" | "tanh";

  /** approximate: "none" (exact, erf) or "tanh". */
  constructor(opts: { approximate?: "none" | "tanh" } | null = {}) {
    super();
    this.approximate = opts?.approximate ?? "none";
  }

  forward(input: Tensor): Tensor {
    return F.gelu(input, { approximate: this.approximate });
  }

  override extraRepr(): string {
    return `approximate='${this.approximate}'`;
  }
}

export class Tanh extends Module<[Tensor], Tensor> {
  forward(input: Tensor): Tensor {
    return F.tanh(input);
  }
}

export class Sigmoid extends Module<[Tensor], Tensor> {
  forward(input: Tensor): Tensor {
    return F.sigmoid(input);
  }
}

export class SiLU extends Module<[Tensor], Tensor> {
  forward(input: Tensor): Tensor {
    return F.silu(input);
  }
}

export class Softmax extends Module<[Tensor], Tensor> {
  constructor(readonly dim: number) {
    super();
  }

  forward(input: Tensor): Tensor {
    return F.softmax(input, this.dim);
  }

  override extraRepr(): string {
    return `dim=${this.dim}`;
  }
}

export class LogSoftmax extends Module<[Tensor], Tensor> {
  constructor(readonly dim: number) {
    super();
  }

  forward(input: Tensor): Tensor {
    return F.logSoftmax(input, this.dim);
  }

  override extraRepr(): string {
    return `dim=${this.dim}`;
  }
}
