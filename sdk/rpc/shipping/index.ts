/**
 * Code shipping: how a call target crosses the wire.
 *
 * 1. Caller: `describeTarget(target, { builtins, registry, scope })` gives a `TargetRecord`
 *    (builtin path, registered name, module reference, or source plus dependencies and hash).
 * 2. Caller: `cache.outgoing(peer, record)` shrinks a source record to its hash once the peer holds it.
 * 3. Callee: `materializeTarget(record, { sdk, registry, cache, peer })` gives the function or class,
 *    compiling a source record once per (peer, hash).
 * 4. Callee: a call that throws `ReferenceError: X is not defined` goes through `explainReferenceError`.
 *
 * ```ts
 * // worker "master" (a notebook): tslab compiles `helper(x)` from an earlier cell to `exports.helper(x)`
 * const rec = describeTarget((x) => helper(x) * 2, { builtins: BuiltinIndex.of(tprpc), registry, scope: exports });
 * send(cache.outgoing("worker1", rec));
 * // worker "worker1"
 * const fn = await materializeTarget(received, { sdk: tprpc, registry, cache, peer: "master" });
 * ```
 */
export { BuiltinIndex } from "./builtins.js";
export { ShippedCodeCache, type ShippedCodeCacheOptions } from "./cache.js";
export { compileShipped, explainReferenceError, shippedScopeOf, type CompileContext } from "./compile.js";
export { describeTarget, type CallTarget, type DescribeContext } from "./describe.js";
export { ShippedCodeMissingError, UnknownTargetError, UnresolvedNameError, UnshippableValueError } from "./errors.js";
export { scanFreeNames, type FreeNameScan } from "./free_names.js";
export { materializeTarget, materializeTargetNow, type MaterializeContext } from "./materialize.js";
export {
  canonicalJson,
  hashSource,
  parseTargetRecord,
  type DepRecord,
  type PlainData,
  type SourceRecord,
  type SourceRefRecord,
  type TargetRecord,
} from "./record.js";
export { Registry } from "./registry.js";
