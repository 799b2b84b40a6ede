/**
 * Typed errors for every layer of tprpc. Every error tprpc throws is a
 * `TprpcError`; messages say what went wrong and what to do next, as
 * PyTorch's do. RPC errors (later layers) derive from `RpcError`.
 */

export class TprpcError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** Shapes that don't broadcast, wrong ranks, sizes that don't match. */
export class ShapeError extends TprpcError {}

/** A dtype that an op cannot take, or a result that can't be cast. */
export class DTypeError extends TprpcError {}

/** A device that is unknown or not viable on this machine. */
export class DeviceError extends TprpcError {}

/** Out-of-range dims, indices, or slices. */
export class IndexError extends TprpcError {}

/** An argument with a bad value (negative size, empty choice set, ...). */
export class ValueError extends TprpcError {}

/** Misuse of autograd: backward twice, in-place on a leaf, non-scalar roots, ... */
export class AutogradError extends TprpcError {}

/** A feature that tprpc does not provide (yet); the message says what to use instead. */
export class NotImplementedError extends TprpcError {}

/** Base class of every error raised by the RPC layers. */
export class RpcError extends TprpcError {}

/**
 * A failure inside the native addon (memory allocation, shared memory, a system call),
 * with the addon's `code` ("ENOMEM", "EMFD", "EMMAP", ...) and the C `errno` (0 when none).
 */
export class NativeError extends TprpcError {
  constructor(
    message: string,
    readonly code: string,
    readonly errno: number,
  ) {
    super(message);
  }
}

/** A call that did not complete within its timeout. */
export class RpcTimeoutError extends RpcError {
  constructor(
    message: string,
    readonly timeoutMs: number,
  ) {
    super(message);
  }
}

/** An error raised by the callee, carried back with its worker, name and stack. */
export class RemoteError extends RpcError {
  constructor(
    message: string,
    /** The worker the error happened on. */
    readonly workerName: string,
    /** The remote error's class name (e.g. "TypeError", "ShapeError"). */
    readonly remoteName: string,
    /** The remote stack trace, as text. */
    readonly remoteStack: string,
  ) {
    super(message);
  }
}

/** The peer is gone (died, left the group, or its connection broke). */
export class WorkerUnavailableError extends RpcError {
  constructor(
    message: string,
    readonly workerName: string,
  ) {
    super(message);
  }
}

/** A peer did not prove knowledge of the group's secret (or we could not prove ours). */
export class AuthenticationError extends RpcError {}

/** A malformed, oversized or unexpected frame; the connection it came on is closed. */
export class ProtocolError extends RpcError {}

/**
 * A value that cannot be sent to another worker (a function, a Promise, a live handle, a
 * circular object, a tensor over the wire's size limit, ...), refused on the sending side
 * before anything is sent, as PyTorch refuses at pickling time. `path` names the value
 * inside the message, e.g. "args[1].opts.cb", or "value.x" for a return value.
 */
export class SerializationError extends RpcError {
  constructor(
    message: string,
    readonly path: string,
  ) {
    super(message);
  }
}

/** A channel or transport that cannot run on this machine or between these peers. */
export class ChannelNotViableError extends RpcError {}

/**
 * No address of this worker reaches the group: TPRPC_ADDR or TPRPC_IFACE names none, a loopback
 * address was chosen for a group whose master is on another host, or no route leads to the master.
 */
export class AddressError extends RpcError {}

/** The RPC API was used before initRpc or after shutdown. */
export class RpcNotInitializedError extends RpcError {}

/** Base class of the errors raised by tprpc.distributed (point-to-point and collectives). */
export class DistributedError extends RpcError {}

/**
 * A received tensor that does not fit the tensor posted for it (shape, dtype or device), or
 * collective inputs that disagree across ranks. `local` and `remote` describe both sides.
 */
export class TensorMismatchError extends DistributedError {
  constructor(
    message: string,
    /** What differs: "shape", "dtype", "device" or "numel". */
    readonly what: string,
    /** This side's value, e.g. "[2, 3]" or "float32". */
    readonly local: string,
    /** The other side's value. */
    readonly remote: string,
  ) {
    super(message);
  }
}
