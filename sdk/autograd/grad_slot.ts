/**
 * Recycling the gradients zeroGrad drops (issue 23, small-op speed).
 *
 * A training step `zeroGrad(); loss.backward(); step()` makes every parameter's gradient afresh: with
 * zeroGrad's default (set to null, as torch 2) the last step's .grad tensors become garbage and
 * backward allocates new ones. PyTorch frees them at once (reference counts) and its allocator hands
 * the same memory to the next step. V8 frees an ArrayBuffer only at a garbage collection, every new
 * one counts towards the next, and a fresh buffer is cold memory: in notebook 03's FedAvg client
 * (MLP 784-200-200-10) the two large weight gradients were 787 of the 1,104 kB of fresh buffers per
 * step.
 *
 * Who may still hold a dropped gradient is known here: the engine made it (a gradient it alone held,
 * or its own copy), and a tensor reaches user code only through the `.grad` getter, which clears the
 * tensor's `gradUnread` flag. Code that provably keeps nothing it reads (the engine's accumulation,
 * the SGD and Adam/AdamW steps, clipGradNorm/clipGradValue, zeroGrad) reads the slot through
 * `peekGrad`, which leaves the flag. So when zeroGrad drops a gradient whose flag is still set, its
 * storage goes back to the output pool (sdk/tensor/pool.ts, Storage.release), and the next backward's
 * gradient of that size takes the same buffer. A gradient anyone read through `.grad` (a hook, a
 * logger, DDP, the distributed optimizer, another optimizer class) or assigned through it (a user's
 * tensor) is left to the garbage collector, as before. A released storage throws on any later read
 * (Storage.data), so a mistake here shows as an error, never as two tensors sharing memory.
 */
import type { Tensor } from "../tensor/tensor.js";
import { ownsWholeStorage } from "./grad_refs.js";

/** The gradient in `t`'s slot, read without handing it out (the caller keeps nothing it reads). */
export function peekGrad(t: Tensor): Tensor | null {
  return t.gradSlot;
}

/** The engine sets a gradient it made and nothing else holds (or keeps the one there, accumulated in place). */
export function setEngineGrad(t: Tensor, g: Tensor): void {
  t.gradSlot = g;
  t.gradUnread = true;
}

/**
 * Drops `t`'s gradient (zeroGrad with setToNone): its buffer goes back to the output pool when the
 * engine made it and no one read it through .grad since; otherwise it is left to GC.
 */
export function dropGrad(t: Tensor): void {
  const g = t.gradSlot;
  // NB: the engine's gradients are whole storages of their own, on the CPU (the output pool's)
  if (g !== null && t.gradUnread && g.device.type === "cpu" && ownsWholeStorage(g)) g.storage.release();
  t.gradSlot = null;
  t.gradUnread = false;
}
