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

/**
 * A cuda_ipc channel's bootstrap (sdk/channel/interface.ts ChannelBootstrap) whose messages travel as
 * { t: "boot", m } lines through `sendLine`; `deliver(m)` hands it a boot message from the other side (kept
 * until the channel listens). Both ends of gpu:check's measurement use it, with opposite roles.
 */
export function lineBootstrap(role, peerName, sendLine) {
  let onBoot = null;
  const early = [];
  const bootstrap = {
    role,
    peerName,
    local: {},
    remote: {},
    remoteAdvert: { name: "cuda_ipc", priorities: {}, domain: "d" },
    pairs: ["cuda-cuda"],
    secret: "s",
    host: "127.0.0.1",
    timeoutMs: 30_000,
    send: (m) => (sendLine({ t: "boot", m }), Promise.resolve()),
    onMessage(cb) {
      onBoot = cb;
      for (const m of early.splice(0)) cb(m);
    },
    onClose() {},
  };
  return { bootstrap, deliver: (m) => (onBoot ? onBoot(m) : early.push(m)) };
}
