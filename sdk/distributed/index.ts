/**
 * tprpc.distributed: point-to-point messages, collectives and
 * DistributedDataParallel over the RPC group's pipes and channels (a
 * camelCase mirror of torch.distributed; docs/architecture.md, "Point-to-point
 * and collectives", tells how it works).
 */
export {
  type OpOptions,
  type P2POptions,
  type CollectiveOptions,
  type ReduceOptions,
  isend,
  irecv,
  send,
  recv,
  P2POp,
  batchIsendIrecv,
  allReduce,
  broadcast,
  allGather,
  reduceScatter,
  barrier,
  newGroup,
  getRank,
  getWorldSize,
  isInitialized,
} from "./api.js";
export { Work } from "./work.js";
export { ReduceOp } from "./reduce_op.js";
export type { ProcessGroup } from "./group.js";
export { DistributedDataParallel, type DistributedDataParallelOptions } from "./ddp.js";
