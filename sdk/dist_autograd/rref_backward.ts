/**
 * RRef.backward (torch.distributed.rpc.RRef.backward): a backward pass whose
 * root is the value an RRef refers to.
 *
 *   const loss = rpc.remote("worker1", computeLoss, [x]);
 *   await distAutograd.context(async (ctxId) => { await loss.backward(ctxId); });
 *
 * - With a context id: the owner runs a distributed backward pass in that
 *   context from its value (it must know the context: the value was made by a
 *   call inside it); gradients are then read with getGradients on each worker.
 * - Without one: a local autograd backward on the owner's value, so only the
 *   owner may call it, as in PyTorch.
 * The rpc layer cannot import this one, so this module installs the
 * implementation into rref.ts when distAutograd is imported.
 */
import { AutogradError } from "../errors/index.js";
import { type RRef, register, rpcSync } from "../rpc/api.js";
import { setRRefBackward } from "../rpc/rref.js";
import { Tensor } from "../tensor/tensor.js";
import { backward } from "./backward.js";

const RREF_BACKWARD = "__tprpcRRefBackward";

function rootOf(value: unknown, rref: RRef<unknown>): Tensor {
  if (!(value instanceof Tensor))
    throw new AutogradError(`${rref.toString()}.backward(): the RRef's value is not a tensor, so it cannot be a root`);
  return value;
}

/** On the owner: the pass itself. */
async function ownerBackward(rref: RRef<unknown>, ctxId: number | null, retainGraph: boolean): Promise<null> {
  const root = rootOf(await rref.toHere(), rref);
  if (ctxId === null) {
    if (root.numel() !== 1)
      throw new AutogradError(
        `${rref.toString()}.backward(): the value has shape [${root.shape.join(", ")}]; it must be a scalar`,
      );
    root.backward(undefined, retainGraph);
  } else await backward(ctxId, [root], retainGraph);
  return null;
}

register(RREF_BACKWARD, ownerBackward);

setRRefBackward(async (rref, ctxId, retainGraph) => {
  if (ctxId !== null && !Number.isSafeInteger(ctxId))
    throw new AutogradError(`RRef.backward(ctxId): ctxId must be a distributed autograd context id, got ${ctxId}`);
  if (rref.isOwner()) {
    await ownerBackward(rref, ctxId, retainGraph);
    return;
  }
  if (ctxId === null)
    throw new AutogradError(
      `${rref.toString()}.backward() without a context id runs local autograd, so only its owner ` +
        `("${rref.ownerName()}") may call it; pass a distributed autograd context id to run it from here`,
    );
  await rpcSync(rref.ownerName(), RREF_BACKWARD, [rref, ctxId, retainGraph]);
});
