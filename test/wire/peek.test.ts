/**
 * peekControl: a message's type and payload from its control bytes alone, before its buffers arrive
 * (the pipe's destination hook for point-to-point messages); tensors come out as TensorPeek.
 */
import { describe, expect, it } from "vitest";
import { arange } from "../../sdk/index.js";
import { ProtocolError } from "../../sdk/errors/index.js";
import { MessageType, encodeMessage, peekControl } from "../../sdk/wire/index.js";

function control(payload: unknown): Uint8Array {
  const m = encodeMessage({ type: MessageType.P2P_MESSAGE, id: 0, payload });
  return new Uint8Array(Buffer.concat([m.header, m.payload]));
}

describe("peekControl", () => {
  it("gives the type and plain values; a tensor as its buffer index and whether it is strided", () => {
    const x = arange(24).float().reshape([4, 6]);
    const p = peekControl(control({ env: { tag: "u:3", src: 2 }, a: x, b: x.transpose(0, 1) }));
    expect(p.type).toBe(MessageType.P2P_MESSAGE);
    expect(p.descriptors.map((d) => d.byteLength)).toEqual([96]); // one storage, one buffer
    expect(p.payload).toEqual({
      env: { tag: "u:3", src: 2 },
      a: { peekedTensor: true, index: 0, strided: false },
      b: { peekedTensor: true, index: 0, strided: true },
    });
  });

  it("refuses malformed control bytes as decodeControl does", () => {
    const c = control({ x: 1 });
    expect(() => peekControl(c.subarray(0, c.byteLength - 1))).toThrow(ProtocolError);
    const bad = c.slice();
    bad[0] = 0;
    expect(() => peekControl(bad)).toThrow(ProtocolError);
  });
});
