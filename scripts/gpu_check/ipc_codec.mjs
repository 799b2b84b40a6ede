// JSON lines with byte arrays, for gpu:check's cuda_ipc peer (./ipc_peer.mjs, ./channels.mjs) and for
// the test fixtures that drive a channel from another process (test/native/fixtures/
// channel-context-peer.mjs, gpu-channel-pair.mjs): a Uint8Array travels as { $b: base64 }, anywhere in a value.
export const enc = (v) =>
  v instanceof Uint8Array
    ? { $b: Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("base64") }
    : Array.isArray(v)
      ? v.map(enc)
      : v && typeof v === "object"
        ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, enc(x)]))
        : v;

export const dec = (v) =>
  v && typeof v === "object" && typeof v.$b === "string"
    ? new Uint8Array(Buffer.from(v.$b, "base64"))
    : Array.isArray(v)
      ? v.map(dec)
      : v && typeof v === "object"
        ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, dec(x)]))
        : v;
