/**
 * What the channel suites share: this process's env set for one describe block, an shm channel to a
 * real peer process, an rpc group of this process and one real local worker pinned to a channel, and
 * byte comparison.
 */
import { afterAll, beforeAll, expect } from "vitest";
import type { TaggedChannel } from "../../sdk/channel/shm/tagged_channel.js";
import { rpc } from "../../sdk/index.js";
import { startLocalWorkers, type LocalCluster } from "../../sdk/rpc/launcher.js";
import { ChannelPeer } from "../native/channel_peer.js";

/** Sets `env` in this process before the enclosing describe block's tests and restores it after them. */
export function useEnv(env: Readonly<Record<string, string>>): void {
  const saved: Record<string, string | undefined> = {};
  beforeAll(() => {
    for (const [k, v] of Object.entries(env)) {
      saved[k] = process.env[k];
      process.env[k] = v;
    }
  });
  afterAll(() => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  });
}

/**
 * For the enclosing describe block: `env` here and in a peer process (test/native/channel_peer.ts) whose
 * shm channel to us is up before the tests; the peer is killed after them. Read the fields in tests.
 */
export function useShmPeer(env: Readonly<Record<string, string>> = {}): { peer: ChannelPeer; channel: TaggedChannel } {
  useEnv(env);
  const s = {} as { peer: ChannelPeer; channel: TaggedChannel };
  beforeAll(async () => {
    const { shmChannelContext } = await import("../../sdk/channel/shm/index.js");
    s.peer = await ChannelPeer.start(shmChannelContext, env);
    s.channel = s.peer.channel as TaggedChannel;
  }, 30_000);
  afterAll(async () => {
    await s.peer?.kill();
  });
  return s;
}

/**
 * For the enclosing describe block: this process as "master" and one local worker ("worker1"), both
 * with `env` (which names the channel in TPRPC_CHANNELS); checks that their pipe chose that channel
 * for cpu-cpu, and shuts the group down after the block.
 */
export function useRpcGroup(env: Readonly<Record<string, string>> & { TPRPC_CHANNELS: string }): void {
  useEnv(env);
  let cluster: LocalCluster | undefined;
  beforeAll(async () => {
    cluster = await startLocalWorkers({ workers: 1, env });
    await rpc.initRpc("master", { ...cluster.initOptions, rpcTimeoutMs: 30_000, initTimeoutMs: 30_000 });
    expect((await rpc.pipeInfo("worker1")).channels["cpu-cpu"]).toBe(env.TPRPC_CHANNELS);
  }, 60_000);
  afterAll(async () => {
    await rpc.shutdown({ graceful: false, timeoutMs: 5_000 }).catch(() => undefined);
    await cluster?.close();
  }, 30_000);
}

/** Whether two byte views hold the same bytes. */
export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return (
    a.byteLength === b.byteLength &&
    Buffer.compare(
      Buffer.from(a.buffer, a.byteOffset, a.byteLength),
      Buffer.from(b.buffer, b.byteOffset, b.byteLength),
    ) === 0
  );
}
