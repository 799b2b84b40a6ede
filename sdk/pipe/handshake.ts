/**
 * The handshake frames' bodies: what HELLO, ACCEPT, SETUP and REFUSE carry,
 * how each is written (one msgpack value, ./codec.ts) and how each is read
 * back from a peer. The readers check every field the pipe uses and throw
 * ProtocolError on anything else, so the pipe only ever sees well-formed
 * values (./pipe.ts then closes on the error).
 */
import { ProtocolError } from "../errors/index.js";
import type { Capabilities, SetupValue } from "../channel/interface.js";
import { decodeBody, encodeBody } from "./codec.js";
import { FrameKind, encodeFrameHead } from "./frame.js";
import type { Negotiation } from "./negotiate.js";

/** HELLO: the connector's capabilities. */
export type Hello = Capabilities;

/** ACCEPT: the acceptor's capabilities, its choice per pair (its side first) and the channel table. */
export interface Accept {
  caps: Capabilities;
  negotiation: Negotiation;
  /** The chosen channel names, in index order (MESSAGE entries and SETUP frames use the index). */
  channels: string[];
}

/** SETUP: channel `c`'s setup message `m` to its peer instance. */
export interface Setup {
  c: number;
  m: SetupValue;
}

/** REFUSE: why the acceptor will not open the pipe. */
export interface Refuse {
  reason: string;
}

export interface HandshakeBodies {
  [FrameKind.HELLO]: Hello;
  [FrameKind.ACCEPT]: Accept;
  [FrameKind.SETUP]: Setup;
  [FrameKind.REFUSE]: Refuse;
}

export type HandshakeKind = keyof HandshakeBodies;

/** A whole handshake frame (header and msgpack body), ready for the connection. */
export function encodeHandshake<K extends HandshakeKind>(kind: K, body: HandshakeBodies[K]): Uint8Array[] {
  const b = encodeBody(body);
  return [encodeFrameHead(kind, b.byteLength, []), b];
}

/** The body of a handshake frame of `kind`, checked; ProtocolError when it is malformed. */
export function decodeHandshake<K extends HandshakeKind>(kind: K, body: Uint8Array): HandshakeBodies[K] {
  const v = decodeBody(body);
  const check = CHECKS[kind] as (v: unknown) => HandshakeBodies[K];
  return check(v);
}

const CHECKS: { [K in HandshakeKind]: (v: unknown) => HandshakeBodies[K] } = {
  [FrameKind.HELLO]: (v) => checkCaps(v, "HELLO"),
  [FrameKind.ACCEPT]: (v) => {
    if (!isRecord(v) || !isRecord(v.negotiation) || !isStringArray(v.channels)) throw malformed("ACCEPT");
    const { choice, missing } = v.negotiation;
    if (!isStringRecord(choice) || !isStringRecord(missing)) throw malformed("ACCEPT");
    return { caps: checkCaps(v.caps, "ACCEPT"), negotiation: { choice, missing }, channels: v.channels };
  },
  [FrameKind.SETUP]: (v) => {
    if (!isRecord(v) || !Number.isInteger(v.c) || (v.c as number) < 0 || !("m" in v)) throw malformed("SETUP");
    return { c: v.c as number, m: v.m as SetupValue };
  },
  [FrameKind.REFUSE]: (v) => {
    if (!isRecord(v) || typeof v.reason !== "string") throw malformed("REFUSE");
    return { reason: v.reason };
  },
};

function malformed(kind: string): ProtocolError {
  return new ProtocolError(`bad pipe frame: malformed ${kind}`);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof Uint8Array);
}

function isStringArray(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((x) => typeof x === "string");
}

function isStringRecord(v: unknown): v is Record<string, string> {
  return isRecord(v) && Object.values(v).every((x) => typeof x === "string");
}

/** The fields of Capabilities the pipe and negotiate() read. */
function checkCaps(c: unknown, kind: string): Capabilities {
  const ok =
    isRecord(c) &&
    typeof c.name === "string" &&
    typeof c.version === "number" &&
    Array.isArray(c.channels) &&
    c.channels.every(
      (x: unknown) =>
        isRecord(x) && typeof x.name === "string" && typeof x.domain === "string" && isRecord(x.priorities),
    ) &&
    isRecord(c.host) &&
    isRecord(c.devices);
  if (!ok) throw new ProtocolError(`bad pipe frame: malformed capabilities in ${kind}`);
  return c as unknown as Capabilities;
}
