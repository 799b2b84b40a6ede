/**
 * The backward engine's count of who still needs each gradient it made (sdk/autograd/engine.ts,
 * points 6 and 7). Only storages created during the pass are tracked: nothing from before it (saved
 * activations, a user's tensors, root gradients) is ever recycled or taken.
 *
 * - hand(t): t was delivered to one more consumer (an edge's gradient buffer);
 * - consume(t): one consumer is done with it; when none is left and nothing outside the engine can
 *   hold it, its buffer goes back to sdk/tensor/pool.ts (Storage.release: poolable storages only);
 * - escape(t): a hook, a user-recorded node, another Node kind or a leaf may keep it: never recycled;
 * - sole(t): t is a whole contiguous storage that only its current consumer holds (a leaf may take
 *   it as .grad without a copy).
 */
import type { Storage } from "../tensor/storage.js";
import { nextStorageSerial } from "../tensor/storage.js";
import type { Tensor } from "../tensor/tensor.js";

/**
 * Whether `t` is a plain tensor over a whole storage of its own: not a view, outside any graph,
 * contiguous from the storage's first element to its last (what the engine's gradients are). A write
 * to it, or recycling its buffer, reaches no other tensor that shares the storage through `t`.
 */
export function ownsWholeStorage(t: Tensor): boolean {
  return t.offset === 0 && t.base === null && !t.requiresGrad && t.storage.length === t.numel() && t.isContiguous();
}

export class GradRefs {
  private readonly since = nextStorageSerial();
  private readonly refs = new Map<Storage, number>();
  private readonly escaped = new Set<Storage>();

  private fresh(t: Tensor): boolean {
    return t.storage.serial >= this.since;
  }

  hand(t: Tensor): void {
    if (this.fresh(t)) this.refs.set(t.storage, (this.refs.get(t.storage) ?? 0) + 1);
  }

  escape(t: Tensor): void {
    if (this.fresh(t)) this.escaped.add(t.storage);
  }

  consume(t: Tensor): void {
    if (!this.fresh(t)) return;
    const s = t.storage;
    const left = (this.refs.get(s) ?? 0) - 1;
    if (left > 0) {
      this.refs.set(s, left);
      return;
    }
    this.refs.delete(s);
    if (!this.escaped.has(s)) s.release();
  }

  sole(t: Tensor): boolean {
    return this.fresh(t) && !this.escaped.has(t.storage) && (this.refs.get(t.storage) ?? 0) <= 1 && ownsWholeStorage(t);
  }
}
