/**
 * RpcPipe: one pipe to a peer worker (../pipe) speaking RPC messages: it
 * encodes messages with the wire codec (RRefs inside are described through
 * this agent's RRefContext) and decodes what arrives.
 *
 * Receiving: the pipe hands over control bytes and the buffers its channels
 * moved; decodeControl rebuilds the message (tensors over those buffers; a
 * malformed frame throws, and the pipe closes); RRefs decoded in it may leave
 * promises the call must wait for (RRefContext.takeOwnedArrivals).
 */
import type { ChannelBuffer } from "../channel/interface.js";
import type { Pipe } from "../pipe/index.js";
import { type DecodedMessage, type MessageType, decodeControl, encodeMessage } from "../wire/index.js";
import type { RRefContext } from "./rref_context.js";

export type RpcMessageHandler = (
  m: DecodedMessage,
  from: RpcPipe,
  /** Bytes received for it (control and buffers), for the profiler. */
  bytes: number,
  /** What the call must wait for before it runs (see RRefContext.takeOwnedArrivals); null: nothing. */
  waits: Promise<unknown>[] | null,
) => void;

export class RpcPipe {
  constructor(
    readonly pipe: Pipe,
    private readonly rrefs: RRefContext,
    onMessage: RpcMessageHandler,
    onClose: (p: RpcPipe, e: Error | null) => void,
  ) {
    pipe.onMessage((r) => {
      const bytes = r.buffers.map((b) => (b.kind === "cpu" ? b.bytes : new Uint8Array(0)));
      // NB: a decode error propagates to the pipe, which closes (a malformed frame closes that pipe)
      const m = decodeControl(r.control, bytes, { user: rrefs });
      onMessage(m, this, r.bytes, rrefs.takeOwnedArrivals());
    });
    pipe.onClose((e) => onClose(this, e));
  }

  /** The worker at the other end. */
  get peerName(): string {
    return this.pipe.peerName;
  }

  /** Encodes and sends one message; resolves to the bytes sent once it left. */
  send(type: MessageType, id: number, payload: unknown): Promise<number> {
    let m;
    // NB: encoding is synchronous, so no other send interleaves: owner RRefs described in it are held by our peer
    this.rrefs.encodingFor = this.peerName;
    try {
      m = encodeMessage({ type, id, payload }, { user: this.rrefs });
    } catch (e) {
      return Promise.reject(e);
    } finally {
      this.rrefs.encodingFor = "";
    }
    let bytes = m.header.byteLength + m.payload.byteLength + 16;
    // NB: the wire layer hands out host bytes for every tensor today (its descriptor names the device,
    // and the receiver's decoder places it), so every buffer travels as cpu → cpu.
    const buffers = m.buffers.map((b) => {
      bytes += b.byteLength + 16;
      return { buffer: { kind: "cpu", bytes: b } as ChannelBuffer };
    });
    return this.pipe.send({ control: [m.header, m.payload], buffers }).then(() => bytes);
  }

  close(): void {
    this.pipe.close();
  }
}
