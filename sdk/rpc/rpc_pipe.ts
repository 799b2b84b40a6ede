/**
 * RpcPipe: one pipe to a peer worker (../pipe) speaking RPC messages: it
 * encodes messages with the wire codec (RRefs inside are described through
 * this agent's RRefContext) and decodes what arrives.
 *
 * Receiving: the pipe hands over control bytes and the buffers its channels
 * moved; decodeControl rebuilds the message (tensors over those buffers; a
 * malformed frame throws, and the pipe closes); RRefs decoded in it may leave
 * promises the call must wait for (RRefContext.takeOwnedArrivals).
 *
 * Sending: each out-of-band buffer goes to the pipe with its target device,
 * the message's route (./device_map_hook.ts `routeOf`) applied to the
 * tensor's device: host bytes for CPU tensors, a device buffer (the storage's
 * device memory, untouched) for CUDA ones. The pipe picks the channel for
 * each (source, target) pair; a CUDA buffer is never copied to the host here.
 * Receiving: a buffer whose target is a device lands in memory allocated on
 * that device (`allocateOnDevice`, the pipe's allocateDevice), and the tensor
 * is rebuilt over it there.
 */
import type { ChannelBuffer, DeviceRef } from "../channel/interface.js";
import { DeviceError } from "../errors/index.js";
import type { Pipe } from "../pipe/index.js";
import type { FrameEntry } from "../pipe/frame.js";
import { deviceBackendFor } from "../tensor/backend/devices.js";
import type { DeviceMemory } from "../tensor/backend/interface.js";
import { Device, cpu } from "../tensor/device.js";
import {
  type BufferDescriptor,
  type DecodedMessage,
  DeviceKind,
  MessageType,
  type WireBuffer,
  decodeControl,
  encodeMessage,
  isDeviceWindow,
  peekControl,
} from "../wire/index.js";
import type { DeviceMap } from "./device_map.js";
import { routeOf } from "./device_map_hook.js";
import type { RRef } from "./rref.js";
import type { RRefContext } from "./rref_context.js";

/** The pipe's allocateDevice: fresh memory for `byteLength` received bytes on a local device. */
export function allocateOnDevice(byteLength: number, d: DeviceRef): ChannelBuffer {
  const device = Device.parse(`${d.type}:${d.index}`);
  const backend = deviceBackendFor(device.type);
  if (!backend) throw new DeviceError(`no ${device.type} device backend here to receive a tensor on ${device}`);
  const memory = backend.alloc(device, byteLength, false);
  return { kind: "cuda", deviceIndex: d.index, memory, offset: 0, byteLength };
}

/** The source device a buffer-table entry names. */
function sourceOf(d: BufferDescriptor): Device {
  return d.deviceType === DeviceKind.CUDA ? Device.parse(`cuda:${d.deviceIndex}`) : cpu;
}

export type RpcMessageHandler = (
  m: DecodedMessage,
  from: RpcPipe,
  /** Bytes received for it (control and buffers), for the profiler. */
  bytes: number,
  /** What the call must wait for before it runs (see RRefContext.takeOwnedArrivals); null: nothing. */
  waits: Promise<unknown>[] | null,
  /** The unconfirmed user RRefs it carried (RRefContext.takeUserArrivals); null: none. */
  users: RRef<unknown>[] | null,
) => void;

/**
 * @internal tprpc.distributed's choice of where a point-to-point message's buffer lands (the pipe's
 * onDestination): `peek()` decodes the message's payload from its control bytes (peekControl: tensors
 * as TensorPeek; null when malformed), `rrefs` tells whose agent receives. Null: fresh memory. Runs
 * synchronously, before the bytes arrive.
 */
export type P2PDestination = (
  rrefs: RRefContext,
  peek: () => unknown,
  index: number,
  entries: readonly FrameEntry[],
) => ChannelBuffer | null;
let p2pDestination: P2PDestination | null = null;

/** @internal Sets the one P2PDestination (sdk/distributed/p2p.ts). */
export function setP2PDestination(h: P2PDestination): void {
  p2pDestination = h;
}

/** Byte 3 of the wire header is the message type (../wire/header.ts). */
const TYPE_BYTE = 3;

export class RpcPipe {
  constructor(
    readonly pipe: Pipe,
    private readonly rrefs: RRefContext,
    onMessage: RpcMessageHandler,
    onClose: (p: RpcPipe, e: Error | null) => void,
  ) {
    pipe.onMessage((r) => {
      const bytes = r.buffers.map((b): WireBuffer =>
        b.kind === "cpu" ? b.bytes : { memory: b.memory as DeviceMemory, offset: b.offset, byteLength: b.byteLength },
      );
      // NB: a decode error propagates to the pipe, which closes (a malformed frame closes that pipe)
      const m = decodeControl(r.control, bytes, { user: rrefs });
      onMessage(m, this, r.bytes, rrefs.takeOwnedArrivals(), rrefs.takeUserArrivals());
    });
    pipe.onClose((e) => onClose(this, e));
    pipe.onDestination((control, index, entries) => {
      if (!p2pDestination || control[TYPE_BYTE] !== MessageType.P2P_MESSAGE) return null;
      const peek = () => {
        try {
          return peekControl(control).payload;
        } catch {
          return null; // NB: the full decode at delivery reports it (and the pipe closes)
        }
      };
      return p2pDestination(rrefs, peek, index, entries);
    });
  }

  /** The worker at the other end. */
  get peerName(): string {
    return this.pipe.peerName;
  }

  /** Encodes and sends one message; resolves to the bytes sent once it left. */
  send(type: MessageType, id: number, payload: unknown): Promise<number> {
    let m: ReturnType<typeof encodeMessage>;
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
    let buffers;
    try {
      const route = m.buffers.length > 0 ? routeOf(payload) : null;
      buffers = m.buffers.map((b, i) => {
        bytes += b.byteLength + 16;
        const target = this.targetOf(sourceOf(m.descriptors[i]!), route!);
        const buffer: ChannelBuffer = isDeviceWindow(b)
          ? {
              kind: "cuda",
              deviceIndex: b.memory.device.index,
              memory: b.memory,
              offset: b.offset,
              byteLength: b.byteLength,
            }
          : { kind: "cpu", bytes: b };
        return { buffer, target: { type: target.type, index: target.type === "cpu" ? 0 : target.index } };
      });
    } catch (e) {
      return Promise.reject(e);
    }
    return this.pipe.send({ control: [m.header, m.payload], buffers }).then(() => bytes);
  }

  /** Where a buffer from `source` lands on the peer: route[source], CPU bytes on the CPU; checked against the peer's devices. */
  private targetOf(source: Device, route: DeviceMap): Device {
    const target = route.get(source) ?? source;
    if (target.type === "cpu") return target;
    if (!route.get(source))
      throw new DeviceError(
        `a tensor on ${source} has no device mapping for "${this.peerName}": map it in deviceMaps, or send x.cpu()`,
      );
    const have = this.pipe.peerDevices?.[target.type] ?? 0;
    if (target.index >= have)
      throw new DeviceError(
        `worker "${this.peerName}" cannot receive a tensor on ${target}: it has ${have} ${target.type.toUpperCase()} ` +
          `device(s) (the device map sends ${source} there); map only to devices "${this.peerName}" has`,
      );
    return target;
  }

  close(): void {
    this.pipe.close();
  }
}
