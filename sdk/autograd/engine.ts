/**
 * The backward engine. Given root nodes and their gradients it runs every
 * node reachable from them once all of its consumers have contributed:
 *
 * 1. Count, for every reachable node, how many edges point at it.
 * 2. Seed the gradient buffers of the roots; ready = nodes with count 0.
 * 3. Pop the ready node with the highest sequence number (latest created),
 *    run its output hooks, apply it, add each input gradient to the buffer of
 *    the next node and decrement that node's count; enqueue it at 0.
 * 4. AccumulateGrad nodes hand their gradient to `accumulate` (default: add
 *    into `.grad`; distributed autograd passes its per-context map).
 * 5. A node's gradient contributions are summed into one engine-owned buffer
 *    (in place from the third on; see sumInto).
 * 6. With the default accumulation (or one that keeps only what it is told it owns: accumulateCopies,
 *    as distributed autograd's context), a leaf whose .grad is null (or that has no gradient in the
 *    context yet) takes its gradient without a copy when only the engine can hold it: a whole contiguous storage made during this pass (so no
 *    saved tensor or user tensor), handed to exactly one edge (not also passed on, nor a view of
 *    the node's own incoming gradient), and seen by no hook.
 * 7. Likewise a gradient made during this pass and handed to one built-in node alone (no hook, not
 *    passed on as it is or as a view) is dead once that node has run: its buffer goes back to the
 *    output pool (sdk/tensor/pool.ts), so backward reuses memory instead of piling it up for the GC.
 *    Nodes recorded by user code (autograd.recordOp) and other Node kinds (distributed autograd's)
 *    are never recycled from.
 * 8. A node's outputs that are module intermediates (./intermediates.ts) are kept, not dropped, before
 *    the node is released (a release may recycle the intermediates its scope dropped).
 *
 * Backward rules run with grad mode off. Nodes free their saved tensors after
 * running unless retainGraph is set.
 */
import { AutogradError, ShapeError } from "../errors/index.js";
import { arraysEqual } from "../util/index.js";
import { getBackend } from "../tensor/backend/registry.js";
import * as raw from "../tensor/raw.js";
import type { Tensor } from "../tensor/tensor.js";
import { noGrad } from "./grad_mode.js";
import { GradRefs, ownsWholeStorage } from "./grad_refs.js";
import { peekGrad, setEngineGrad } from "./grad_slot.js";
import { keep as keepIntermediate } from "./intermediates.js";
import { AccumulateGrad, FunctionNode, type Node, gradEdge } from "./node.js";

export interface BackwardOptions {
  retainGraph?: boolean;
  /** Receives each leaf's gradient; default accumulates into leaf.grad. */
  accumulate?: (leaf: Tensor, grad: Tensor, owned?: boolean) => void;
  /**
   * `accumulate` keeps the gradient it is given only when its third argument says the engine alone
   * held it (owned); else it only reads it. Then, as with the default accumulation, a leaf without
   * hooks gets such an owned gradient without a copy, and one it only read goes back to the pool.
   */
  accumulateCopies?: boolean;
}

export interface RootGrad {
  node: Node;
  grad: Tensor;
}

function addGrads(a: Tensor | undefined, b: Tensor): Tensor {
  return a === undefined ? b : raw.binary("add", a, b);
}

/**
 * Sums gradient contributions for one node. The first sum of two is a fresh tensor that only the
 * engine holds (`owned`); later contributions are added into it in place (an elementwise out may
 * alias an input), so a node with k inputs of gradient allocates one buffer, not k - 1. When the
 * first contribution itself is a whole storage made during this pass that only this buffer holds
 * (GradRefs.sole: no hook, view or other consumer can see it), the second is added into it too, and
 * the node allocates nothing.
 */
function sumInto(owned: Set<Tensor>, refs: GradRefs, a: Tensor | undefined, b: Tensor): Tensor {
  if (
    a !== undefined &&
    (owned.has(a) || refs.sole(a)) &&
    a.storage !== b.storage &&
    a.dtype === b.dtype &&
    arraysEqual(a.shape, b.shape)
  ) {
    getBackend().binary("add", a, b, a);
    owned.add(a);
    refs.consume(b);
    return a;
  }
  const sum = addGrads(a, b);
  if (a !== undefined) {
    owned.add(sum);
    owned.delete(a);
    refs.hand(sum); // pending in the node's buffer, as a delivered gradient is
    refs.consume(a);
    refs.consume(b);
  }
  return sum;
}

function runHooks(hooks: readonly ((g: Tensor) => Tensor | undefined | void)[], grad: Tensor): Tensor {
  let g = grad;
  for (const h of hooks) {
    const r = h(g);
    if (r) g = r;
  }
  return g;
}

/**
 * Default leaf accumulation: the first gradient is copied into a fresh contiguous tensor (never
 * aliasing the graph's); later ones are added into it in place, as torch's AccumulateGrad does
 * (so micro-batches accumulate without a new tensor each), unless .grad was replaced by one that
 * is not such a plain tensor (another shape or dtype, a view, part of a graph).
 */
export function accumulateIntoGrad(leaf: Tensor, grad: Tensor, owned = false): void {
  // NB: peekGrad and setEngineGrad: what .grad holds here is the engine's own until someone reads it
  // (./grad_slot.ts: zeroGrad may then recycle its buffer)
  const cur = peekGrad(leaf);
  if (cur === null) {
    // NB: `owned`: the engine made this gradient during this pass and nothing else holds it (see
    // runBackward): it becomes .grad itself, as torch's AccumulateGrad steals a gradient no one shares
    setEngineGrad(leaf, owned ? grad : raw.copyAs(grad));
    return;
  }
  // NB: a plain tensor: its own whole storage (no other view can see the write), outside any graph
  const plain = cur !== grad && ownsWholeStorage(cur) && cur.dtype === grad.dtype;
  if (plain && arraysEqual(cur.shape, grad.shape)) {
    getBackend().binary("add", cur, grad, cur);
    cur.storage.version++;
    return;
  }
  setEngineGrad(leaf, raw.binary("add", cur, grad));
}

/** Whether a leaf may take a gradient only the engine holds as its .grad without a copy (see runBackward). */
const STEAL_SOLE_GRADS = true;

/** Runs the graph from the given nodes with the given gradients (used by backward() and distributed autograd). */
export function runBackward(roots: readonly RootGrad[], opts: BackwardOptions = {}): void {
  const accumulate = opts.accumulate ?? accumulateIntoGrad;
  const steal = STEAL_SOLE_GRADS && (opts.accumulate === undefined || opts.accumulateCopies === true);
  const refs = new GradRefs();
  const deps = new Map<Node, number>();
  const seen = new Set<Node>();
  const stack = roots.map((r) => r.node);
  for (const n of stack) seen.add(n);
  while (stack.length) {
    const n = stack.pop()!;
    for (const next of n.next) {
      if (!next) continue;
      deps.set(next, (deps.get(next) ?? 0) + 1);
      if (!seen.has(next)) {
        seen.add(next);
        stack.push(next);
      }
    }
  }
  const buffers = new Map<Node, Tensor>();
  const owned = new Set<Tensor>();
  for (const r of roots) buffers.set(r.node, addGrads(buffers.get(r.node), r.grad));
  for (const b of buffers.values()) refs.hand(b); // a sum of two roots' gradients is the engine's
  const ready: Node[] = [...new Set(roots.map((r) => r.node))].filter((n) => !deps.get(n));
  noGrad(() => drain({ ready, buffers, owned, deps, refs, opts, steal, accumulate }));
}

/** runBackward's state while it runs the ready nodes. */
interface Drain {
  ready: Node[];
  buffers: Map<Node, Tensor>;
  owned: Set<Tensor>;
  deps: Map<Node, number>;
  refs: GradRefs;
  opts: BackwardOptions;
  steal: boolean;
  accumulate: NonNullable<BackwardOptions["accumulate"]>;
}

/**
 * runBackward's loop, a function of its own rather than a closure made per backward pass: V8 holds
 * a closure site's optimized code weakly, and a full GC between two passes dropped it, so the loop was
 * compiled again and again (issue 23; docs/architecture.md, small-op speed).
 */
function drain(s: Drain): void {
  const { ready, buffers, owned, deps, refs, opts, steal, accumulate } = s;
  while (ready.length) {
    // latest-created first, as PyTorch's engine orders ready nodes
    let best = 0;
    for (let i = 1; i < ready.length; i++) if (ready[i]!.sequenceNr > ready[best]!.sequenceNr) best = i;
    const node = ready.splice(best, 1)[0]!;
    let grad = buffers.get(node);
    buffers.delete(node);
    // NB: handed to the node now (which may save it or pass it on): no longer the engine's alone
    if (grad !== undefined) owned.delete(grad);
    let outs: (Tensor | null)[] = node.next.map(() => null);
    // a node recorded by user code (or of another kind) may keep what it is given or hands on
    const builtin = node instanceof FunctionNode && !node.custom;
    if (grad !== undefined) {
      if (node instanceof AccumulateGrad) {
        const hooks = node.variable.gradHooks;
        if (steal && hooks.length === 0) {
          const take = refs.sole(grad);
          if (opts.accumulate) opts.accumulate(node.variable, grad, take);
          else accumulateIntoGrad(node.variable, grad, take);
          if (take) refs.escape(grad);
          else refs.consume(grad);
        } else {
          refs.escape(grad);
          accumulate(node.variable, runHooks(hooks, grad));
        }
        grad = undefined;
      } else {
        if (node.outputHooks.length > 0 || !builtin) {
          refs.escape(grad);
          grad = runHooks(node.outputHooks, grad);
          refs.escape(grad);
        }
        const keep = node.retainGradOf?.deref();
        if (keep) keep.grad = keep.grad ? raw.binary("add", keep.grad, grad) : raw.copyAs(grad);
        outs = node.apply(grad);
        // NB: before release (which may recycle a module's dropped intermediates): one that goes on as a
        // gradient is not dropped any more (./intermediates.ts)
        for (const g of outs) if (g) keepIntermediate(g);
        if (!opts.retainGraph) node.release();
      }
    }
    for (let i = 0; i < node.next.length; i++) {
      const next = node.next[i];
      if (!next) continue;
      const g = outs[i];
      if (g) {
        if (builtin) refs.hand(g);
        else refs.escape(g);
        buffers.set(next, sumInto(owned, refs, buffers.get(next), g));
      }
      const left = deps.get(next)! - 1;
      deps.set(next, left);
      if (left === 0) ready.push(next);
    }
    // point 7: this node is done with its gradient (after its outputs were counted: one may be a view of it)
    if (grad !== undefined) refs.consume(grad);
  }
}

/** tensor.backward(gradient?, retainGraph?) */
export function backward(t: Tensor, gradient?: Tensor, retainGraph = false): void {
  const node = gradEdge(t);
  if (!node)
    throw new AutogradError(
      "element 0 of tensors does not require grad and does not have a gradFn; " +
        "set requiresGrad on the leaf tensors you want gradients for (or call backward on a tensor computed from them)",
    );
  let g = gradient;
  if (!g) {
    if (t.numel() !== 1)
      throw new AutogradError(
        `grad can be implicitly created only for scalar outputs (this tensor has shape [${t.shape.join(", ")}]); ` +
          "pass a gradient of the same shape: t.backward(gradient)",
      );
    g = raw.binary("add", raw.empty(t.shape, t.dtype, t.device), 1);
  } else if (!arraysEqual(g.shape, t.shape)) {
    throw new ShapeError(
      `Mismatch in shape: grad_output[0] has a shape of [${g.shape.join(", ")}] and output[0] has a shape of [${t.shape.join(", ")}].`,
    );
  }
  runBackward([{ node, grad: g }], { retainGraph });
}

/**
 * torch.autograd.grad: gradients of `outputs` with respect to `inputs`,
 * returned instead of accumulated into `.grad`.
 */
export function grad(
  outputs: Tensor | Tensor[],
  inputs: Tensor | Tensor[],
  opts: { gradOutputs?: Tensor[]; retainGraph?: boolean; allowUnused?: boolean } = {},
): (Tensor | null)[] {
  const outs = Array.isArray(outputs) ? outputs : [outputs];
  const ins = Array.isArray(inputs) ? inputs : [inputs];
  const roots: RootGrad[] = outs.map((o, i) => {
    const node = gradEdge(o);
    if (!node) throw new AutogradError(`element ${i} of tensors does not require grad and does not have a gradFn`);
    const g = opts.gradOutputs?.[i];
    if (!g && o.numel() !== 1) throw new AutogradError("grad can be implicitly created only for scalar outputs");
    return { node, grad: g ?? raw.binary("add", raw.empty(o.shape, o.dtype, o.device), 1) };
  });
  const results = new Map<Tensor, Tensor>();
  const cleanups: (() => void)[] = [];
  for (const x of ins) {
    if (x.isLeaf) continue;
    const node = x.gradFn as Node;
    const hook = (g: Tensor) => {
      results.set(x, results.has(x) ? raw.binary("add", results.get(x)!, g) : g);
    };
    node.outputHooks.push(hook);
    cleanups.push(() => node.outputHooks.splice(node.outputHooks.indexOf(hook), 1));
  }
  const leafSet = new Set(ins.filter((x) => x.isLeaf));
  try {
    runBackward(roots, {
      retainGraph: opts.retainGraph ?? false,
      accumulate: (leaf, g) => {
        if (leafSet.has(leaf)) results.set(leaf, results.has(leaf) ? raw.binary("add", results.get(leaf)!, g) : g);
      },
    });
  } finally {
    for (const c of cleanups) c();
  }
  return ins.map((x, i) => {
    const r = results.get(x) ?? null;
    if (!r && !opts.allowUnused)
      throw new AutogradError(
        `One of the differentiated Tensors (input ${i}) appears to not have been used in the graph. Set allowUnused: true if this is the desired behavior.`,
      );
    return r;
  });
}
