/**
 * Graph nodes. Every differentiable op that sees an input requiring grad
 * creates one Node for its (single) output: `next[i]` is where the gradient
 * for input i goes (null when that input needs none). Leaves that require
 * grad get one AccumulateGrad node each, cached per tensor.
 *
 * Distributed autograd subclasses Node for its send/recv functions and runs
 * the engine from given nodes with given gradients (engine.ts: runBackward).
 */
import { AutogradError } from "../errors/index.js";
import type { GradFnRef, GradHook, Tensor } from "../tensor/tensor.js";
import { type Scope, enterNode, leaveNode } from "./intermediates.js";

let sequence = 0;

export abstract class Node implements GradFnRef {
  abstract readonly name: string;
  /** Creation order; the engine runs later nodes first when both are ready. */
  readonly sequenceNr = sequence++;
  /** Hooks on the gradient of this node's output tensor (registerHook on a non-leaf). */
  readonly outputHooks: GradHook[] = [];
  /** The non-leaf output tensor that asked for retainGrad(), if any (weakly held). */
  retainGradOf: WeakRef<Tensor> | null = null;

  constructor(readonly next: readonly (Node | null)[]) {}

  /** Maps the gradient of the output to gradients of the inputs (aligned with `next`). */
  abstract apply(grad: Tensor): (Tensor | null)[];

  /** Frees what backward needed (retainGraph = false). */
  release(): void {}
}

/** A value saved for backward, with the version it had, to catch in-place changes. */
export class SavedTensor {
  private readonly version: number;
  constructor(
    readonly tensor: Tensor,
    private readonly owner: string,
  ) {
    this.version = tensor.storage.version;
  }

  check(): void {
    const now = this.tensor.storage.version;
    if (now !== this.version)
      throw new AutogradError(
        `one of the variables needed for gradient computation has been modified by an inplace operation: ` +
          `[${this.tensor.dtype} [${this.tensor.shape.join(", ")}]], which is saved by ${this.owner}, is at version ${now}; ` +
          `expected version ${this.version} instead. Use an out-of-place op (e.g. x.add(y) instead of x.add_(y)) or clone() first.`,
      );
  }
}

/** Maps the output gradient to one gradient per input; needs[i] says whether input i wants one. */
export type BackwardFn = (grad: Tensor, needs: readonly boolean[]) => (Tensor | null)[];

/**
 * The backward closure each built-in op name ran last, kept alive until that name's next one runs.
 * NB: V8 drops a closure literal's optimized code at a full GC when none of its closures is alive, and
 * a step's backward closures all die with its graph, so each full GC cost a round of recompiling them
 * (a one-process GPT step, steps 60-100: 54 TurboFan compiles with ~3 ms of background work each
 * on the other core, against 13 with this; 207-212 -> 201-205 ms a step). A kept closure still holds
 * what it captured, which is among its op's inputs, output and saved tensors: only nodes whose tensors
 * total at most RETAIN_MAX_BYTES are kept (small ops, where compiled code matters; a large op's time
 * is its kernels'), and never a user's (autograd.recordOp), which may capture anything.
 */
const lastRun = new Map<string, BackwardFn>();
const RETAIN_MAX_BYTES = 4 << 20;

/** The node of an ordinary op: a backward closure written beside its forward. */
export class FunctionNode extends Node {
  private fn: BackwardFn | null;
  private saved: SavedTensor[];
  /** Recorded by user code (autograd.recordOp): its backward may keep the gradient it is given. */
  custom = false;
  /** The innermost scope of module intermediates open when this node was made (./intermediates.ts). */
  private scope: Scope | null = enterNode();

  constructor(
    readonly name: string,
    next: readonly (Node | null)[],
    fn: BackwardFn,
    saved: readonly Tensor[],
    /** Bytes of the op's tensors (inputs, output, saved): what its closure may hold (see lastRun). */
    private readonly bytes = Infinity,
  ) {
    super(next);
    this.fn = fn;
    this.saved = saved.map((t) => new SavedTensor(t, name));
  }

  apply(grad: Tensor): (Tensor | null)[] {
    if (!this.fn)
      throw new AutogradError(
        "Trying to backward through the graph a second time (or directly access saved tensors after they have " +
          "already been freed). Saved intermediate values of the graph are freed when you call backward(). " +
          "Specify retainGraph: true if you need to backward through the graph a second time.",
      );
    for (const s of this.saved) s.check();
    if (!this.custom) {
      if (this.bytes <= RETAIN_MAX_BYTES) lastRun.set(this.name, this.fn);
      else lastRun.delete(this.name);
    }
    return this.fn(
      grad,
      this.next.map((n) => n !== null),
    );
  }

  override release(): void {
    this.fn = null;
    this.saved = [];
    // NB: after dropping the closure: nothing it captured can be read through this node any more
    const scope = this.scope;
    this.scope = null;
    leaveNode(scope);
  }
}

/** Sink for a leaf's gradient; the engine hands it to the accumulate callback. */
export class AccumulateGrad extends Node {
  readonly name = "AccumulateGrad";
  constructor(readonly variable: Tensor) {
    super([]);
  }

  apply(): (Tensor | null)[] {
    return [];
  }
}

const accumulators = new WeakMap<Tensor, AccumulateGrad>();

/** The node that receives gradient for `t`: its gradFn, its AccumulateGrad, or null. */
export function gradEdge(t: Tensor): Node | null {
  if (t.gradFn) return t.gradFn as Node;
  if (!t.requiresGrad) return null;
  let acc = accumulators.get(t);
  if (!acc) {
    acc = new AccumulateGrad(t);
    accumulators.set(t, acc);
  }
  return acc;
}
