/**
 * Errors on the wire (extension 0x11). Any Error travels as
 * `{name, message, stack, code?, worker?}` and arrives as a RemoteErrorRecord —
 * plain data, never a constructor looked up by name. The rpc layer turns a
 * record into the RemoteError it rejects a call with: `errorFromWire(rec, peerName)`.
 *
 * A RemoteError forwarded on (A calls B, B's call to C failed, B rethrows) keeps the
 * original error's name, stack and worker, so A sees where it really happened.
 */
import { ProtocolError, RemoteError } from "../errors/index.js";
import { WIRE_EXT, defineWireType } from "./registry.js";

/** A remote error as received: what errorFromWire needs. */
export class RemoteErrorRecord {
  constructor(
    /** The remote error's class name ("TypeError", "ShapeError", ...). */
    readonly name: string,
    readonly message: string,
    /** The remote stack trace, as text ("" when the sender had none). */
    readonly stack: string,
    /** The remote error's `code` (e.g. "ENOENT"), when it had a string one. */
    readonly code?: string,
    /** The worker the error first happened on, when it was forwarded from another worker. */
    readonly worker?: string,
  ) {}
}

interface ErrorWire {
  name: string;
  message: string;
  stack: string;
  code?: string;
  worker?: string;
}

function encodeError(e: Error): ErrorWire {
  const code = (e as { code?: unknown }).code;
  const out: ErrorWire =
    e instanceof RemoteError
      ? { name: e.remoteName, message: e.message, stack: e.remoteStack, worker: e.workerName }
      : { name: String(e.name), message: String(e.message), stack: typeof e.stack === "string" ? e.stack : "" };
  if (typeof code === "string") out.code = code;
  return out;
}

function decodeError(data: unknown): RemoteErrorRecord {
  const d = data as Partial<Record<keyof ErrorWire, unknown>> | null;
  if (typeof d !== "object" || d === null || Array.isArray(d))
    throw new ProtocolError("bad error record: expected {name, message, stack}");
  const str = (k: keyof ErrorWire, optional: boolean): string | undefined => {
    const v = d[k];
    if (v === undefined && optional) return undefined;
    if (typeof v !== "string") throw new ProtocolError(`bad error record: "${k}" must be a string`);
    return v;
  };
  return new RemoteErrorRecord(
    str("name", false)!,
    str("message", false)!,
    str("stack", false)!,
    str("code", true),
    str("worker", true),
  );
}

/**
 * The RemoteError for a received record: `workerName` is the peer the reply came
 * from (the record's own worker wins when it was forwarded). The original `code`, if
 * any, is kept as `err.code`.
 */
export function errorFromWire(rec: RemoteErrorRecord, workerName: string): RemoteError {
  const worker = rec.worker ?? workerName;
  const msg = rec.worker !== undefined ? rec.message : `${rec.name} on worker "${worker}": ${rec.message}`;
  const err = new RemoteError(msg, worker, rec.name, rec.stack);
  if (rec.code !== undefined) Object.defineProperty(err, "code", { value: rec.code, enumerable: true });
  return err;
}

defineWireType(WIRE_EXT.ERROR, { Class: Error, encode: encodeError, decode: decodeError });
