/**
 * The autograd functions at RPC boundaries (PyTorch's SendRpcBackward and
 * RecvRpcBackward). A message that carries tensors requiring grad inside a
 * context records, on the sender, one SendNode whose inputs are those tensors,
 * and on the receiver one RecvNode per received tensor (its gradFn), all
 * carrying the message's autograd id and pointing back at the sender.
 *
 * In backward: a RecvNode hands its gradient to the local run in progress
 * (`LocalRun`), which, once the synchronous engine run is over, sends the
 * gradients of each message in one piece to the message's sender; there the
 * SendNode is the root of a new local run, fed with those gradients.
 */
import { AutogradError, ShapeError } from "../errors/index.js";
import { Node } from "../autograd/node.js";
import * as raw from "../tensor/raw.js";
import type { Tensor } from "../tensor/tensor.js";
import { arraysEqual } from "../util/index.js";

export class SendNode extends Node {
  readonly name = "SendRpcBackward";
  private grads: (Tensor | null)[] | null = null;
  /** The shapes of the inputs, to check the gradients a peer sends. */
  private readonly shapes: number[][];

  constructor(
    next: readonly (Node | null)[],
    inputs: readonly Tensor[],
    readonly ctxId: number,
    readonly msgId: number,
    /** The worker the message went to (the one that sends gradients back). */
    readonly to: string,
  ) {
    super(next);
    this.shapes = inputs.map((t) => [...t.shape]);
  }

  /** The gradients for the next run from this node (one per input, null for none); checked here. */
  setGrads(grads: readonly (Tensor | null)[]): void {
    if (grads.length !== this.next.length)
      throw new AutogradError(
        `worker "${this.to}" sent ${grads.length} gradients for a message that carried ${this.next.length} tensors requiring grad`,
      );
    grads.forEach((g, i) => {
      if (g && !arraysEqual(g.shape, this.shapes[i]!))
        throw new ShapeError(
          `the gradient from "${this.to}" for tensor ${i} of message ${this.msgId} has shape [${g.shape.join(", ")}], ` +
            `the tensor had [${this.shapes[i]!.join(", ")}]`,
        );
    });
    this.grads = [...grads];
  }

  apply(): (Tensor | null)[] {
    const g = this.grads ?? this.next.map(() => null);
    this.grads = null;
    return g;
  }
}

/** Collects the gradients RecvNodes produce during one synchronous engine run, per message. */
export class LocalRun {
  readonly messages = new Map<number, { from: string; route: [string, string][] | null; grads: (Tensor | null)[] }>();

  add(node: RecvNode, grad: Tensor): void {
    let m = this.messages.get(node.msgId);
    if (!m) {
      m = { from: node.from, route: node.route, grads: Array.from({ length: node.count }, () => null) };
      this.messages.set(node.msgId, m);
    }
    const prev = m.grads[node.index];
    // NB: one RecvNode per tensor, so this only sums when the engine applies a node twice (never today)
    m.grads[node.index] = prev ? raw.binary("add", prev, grad) : grad;
  }
}

let active: LocalRun | null = null;

/** Runs the synchronous engine call `fn` with `run` collecting what RecvNodes produce. */
export function withLocalRun(run: LocalRun, fn: () => void): void {
  const prev = active;
  active = run;
  try {
    fn();
  } finally {
    active = prev;
  }
}

export class RecvNode extends Node {
  readonly name = "RecvRpcBackward";

  constructor(
    readonly ctxId: number,
    readonly msgId: number,
    /** Which of the message's tensors requiring grad this node receives. */
    readonly index: number,
    /** How many tensors requiring grad the message carried. */
    readonly count: number,
    /** The worker that sent the message (and holds its SendNode). */
    readonly from: string,
    /** The device route the gradients go back by: the inverse of the message's (null: none, CPU only). */
    readonly route: [string, string][] | null = null,
  ) {
    super([]);
  }

  apply(grad: Tensor): (Tensor | null)[] {
    if (!active)
      throw new AutogradError(
        `this graph holds a tensor received from "${this.from}" over RPC in distributed autograd context ` +
          `${this.ctxId}; run its backward with await distAutograd.backward(ctxId, [loss]), not loss.backward()`,
      );
    active.add(this, grad);
    return [];
  }
}
