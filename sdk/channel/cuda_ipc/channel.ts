/**
 * The cuda_ipc Channel of one pipe: ./protocol.ts's sender and receiver
 * joined to the pipe. Descriptors ride in the pipe's control frames; acks
 * ({ack: seq}) and failures ({fail: seq, message}) come back over the
 * bootstrap. Only device buffers cross ("cuda-cuda"); a host buffer is a
 * caller's error and rejects `done` with ChannelNotViableError.
 */
import { ChannelNotViableError, ProtocolError, WorkerUnavailableError } from "../../errors/index.js";
import type { Channel, ChannelBootstrap, ChannelBuffer, ChannelSend, SetupValue } from "../interface.js";
import { type CudaIpcDriver, devicePointer } from "./driver.js";
import { IpcReceiver, IpcSender, decodeIpcDescriptor, encodeIpcDescriptor } from "./protocol.js";

export function createCudaIpcChannel(b: ChannelBootstrap, driver: CudaIpcDriver, pollMs = 1): Channel {
  const sender = new IpcSender(driver);
  const receiver = new IpcReceiver(driver, pollMs);
  let closed = false;

  const close = (error?: Error): void => {
    if (closed) return;
    closed = true;
    const e = error ?? new WorkerUnavailableError(`the cuda_ipc channel to "${b.peerName}" closed`, b.peerName);
    sender.close(e);
    receiver.close(e);
  };

  b.onMessage((msg: SetupValue) => {
    const m = msg as { ack?: number; fail?: number; message?: string } | null;
    try {
      if (typeof m?.ack === "number") sender.ack(m.ack);
      else if (typeof m?.fail === "number")
        sender.fail(
          m.fail,
          new ChannelNotViableError(`cuda_ipc: "${b.peerName}" could not take a transfer: ${m.message ?? "?"}`),
        );
      else throw new ProtocolError(`cuda_ipc: unexpected setup message from "${b.peerName}"`);
    } catch (e) {
      close(e as Error);
    }
  });
  b.onClose((error) => close(error ?? undefined));

  return {
    name: "cuda_ipc",
    get closed() {
      return closed;
    },
    send(buffer: ChannelBuffer): ChannelSend {
      if (buffer.kind !== "cuda") {
        const done = Promise.reject(
          new ChannelNotViableError("cuda_ipc moves device buffers only; a host buffer came"),
        );
        return { descriptor: new Uint8Array(0), done };
      }
      try {
        const ptr = devicePointer(buffer.memory) + BigInt(buffer.offset);
        const { descriptor, done } = sender.send(buffer.deviceIndex, ptr, buffer.byteLength);
        return { descriptor: encodeIpcDescriptor(descriptor), done };
      } catch (e) {
        return { descriptor: new Uint8Array(0), done: Promise.reject(e as Error) };
      }
    },
    async recv(descriptor: Uint8Array, into: ChannelBuffer): Promise<void> {
      const desc = decodeIpcDescriptor(descriptor);
      try {
        if (into.kind !== "cuda") throw new ChannelNotViableError("cuda_ipc receives into device buffers only");
        if (into.byteLength !== desc.byteLength)
          throw new ProtocolError(`cuda_ipc: ${desc.byteLength} bytes sent, destination holds ${into.byteLength}`);
        await receiver.recv(desc, into.deviceIndex, devicePointer(into.memory) + BigInt(into.offset));
      } catch (e) {
        if (!closed) void b.send({ fail: desc.seq, message: (e as Error).message }).catch(() => undefined);
        throw e;
      }
      await b.send({ ack: desc.seq });
    },
    close,
  };
}
