/**
 * The wire layer: how one RPC message becomes bytes and back. A message is a
 * fixed header (./header.ts), a msgpack payload with extension types for tensors,
 * errors and the rpc layer's own types (./registry.ts, ./tensor.ts, ./error.ts), and
 * tensor storages sent out of band (the pipe layer frames them and moves the storages
 * through channels); decodeControl / decodeMessage treat every message as hostile (./scan.ts).
 *
 * Two-line round trip:
 *   const m = encodeMessage({ type: MessageType.REQUEST, id: 7, payload: { args: [x, 1] } });
 *   const back = decodeMessage(m.header, m.payload, m.buffers); // back.payload.args[0] is a Tensor
 */
export {
  MessageType,
  DeviceKind,
  HEADER_BYTES,
  BUFFER_DESC_BYTES,
  WIRE_VERSION,
  DEFAULT_LIMITS,
  type BufferDescriptor,
  type FrameHeader,
  type FrameLimits,
} from "./header.js";
export {
  encodeMessage,
  decodeMessage,
  decodeFrame,
  decodeControl,
  peekControl,
  DEFAULT_MAX_DEPTH,
  type Message,
  type DecodedMessage,
  type EncodedMessage,
  type EncodeOptions,
  type DecodeOptions,
  type Frame,
} from "./codec.js";
export {
  registerWireType,
  WIRE_EXT,
  type WireType,
  type WireEncodeContext,
  type WireDecodeContext,
  type WireBuffer,
  type DeviceWindow,
  isDeviceWindow,
} from "./registry.js";
export { RemoteErrorRecord, errorFromWire } from "./error.js";
export { MAX_TENSOR_DIMS, type TensorDescriptor, type TensorPeek } from "./tensor.js";
