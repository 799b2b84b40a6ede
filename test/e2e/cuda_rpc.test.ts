/**
 * CUDA tensors over RPC between real processes on 127.0.0.1, on the emulated
 * CUDA device (TPRPC_CUDA=emulate: the .cu kernels compiled for the host,
 * "device" memory in host memory; emulate:N gives it N device indices). It
 * checks the wire, the device maps and the cuda_staging channel
 * between processes; it says nothing about a GPU.
 *
 * The group (static, 3 ranks): this process is the master (2 emulated devices),
 * worker1 has 3, worker2 has no CUDA (TPRPC_CUDA=0). The master's maps:
 * worker1 { cuda:0 -> cuda:1, cuda:1 -> cuda:0 }, worker2 { cuda:1 -> cpu }.
 * 1. CUDA to CUDA both ways: a tensor lands on its mapped device, the reply
 *    comes back by the inverse map; large (chunked) and strided ones intact.
 * 2. CUDA to CPU and back: worker2 gets host bytes, its CPU reply lands on cuda:1.
 * 3. Unmapped devices: a DeviceError naming the device and the callee, on the
 *    request (before sending) and on the reply (from the callee); a map that is
 *    not one-to-one is refused.
 * 4. Beyond PyTorch: an RRef to a CUDA value fetched with the map applied, and
 *    the CUDA-RPC recipe's two shards (master cuda:0, worker1 cuda:1) trained
 *    under distributed autograd with a DistributedOptimizer: losses, gradients
 *    and parameters equal to the same run on CPU.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as sdk from "../../sdk/index.js";
import type { Tensor } from "../../sdk/index.js";
import { DeviceError, RemoteError, ValueError, rpc } from "../../sdk/index.js";
import { within } from "../dist_autograd/group.js";
import { expectClose } from "../helpers.js";
import { freePort, startWorker } from "./workers.js";

// NB: a plain const, not the import binding: shipped sources name `tprpc`, which every worker has.
const tprpc = sdk;
// NB: read when cuda:0 is first used (initRpc counts the devices), which is after these lines.
process.env.TPRPC_CUDA = "emulate:2";

const SECRET = "cuda-rpc-secret-0123456789";
const T = { timeoutMs: 30_000 };

/** The recipe's shard (a Linear layer on a device) and the worker-side helpers; registered in every process. */
function installCudaModels(): string {
  const T = tprpc;
  class Shard extends T.nn.Module {
    linear: InstanceType<typeof T.nn.Linear>;
    constructor(
      readonly device: string,
      seed: number,
      inF: number,
      outF: number,
    ) {
      super();
      T.manualSeed(seed);
      this.linear = new T.nn.Linear(inF, outF).to(device);
    }
    forward(x: Tensor): Tensor {
      return this.linear.forward(x.to(this.device)).tanh(); // x.to is a no-op when x is already there
    }
  }
  type ShardRef = { toHere(): Promise<Shard> };
  T.rpc.register("cudaRpc.Shard", Shard);
  (globalThis as Record<string, unknown>).__cudaRpcShard = Shard;
  T.rpc.register("cudaRpc.paramRRefs", async (m: ShardRef) =>
    (await m.toHere()).parameters().map((p) => new T.rpc.RRef(p)),
  );
  // the shard's gradients in a context, on their device (they come back by the inverse map)
  T.rpc.register("cudaRpc.gradsOf", async (ctxId: number, m: ShardRef) => {
    const g = T.distAutograd.getGradients(ctxId);
    return (await m.toHere()).parameters().map((p) => g.get(p) ?? null);
  });
  T.rpc.register("cudaRpc.paramsOf", async (m: ShardRef) =>
    (await m.toHere()).parameters().map((p) => p.cpu().flatten().toArray()),
  );
  return "ok";
}

type ShardClass = new (
  device: string,
  seed: number,
  inF: number,
  outF: number,
) => sdk.nn.Module & {
  forward(x: Tensor): Tensor;
};
const localShard = (): ShardClass => (globalThis as Record<string, unknown>).__cudaRpcShard as ShardClass;

describe("CUDA tensors over RPC between processes (emulated CUDA device)", () => {
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    const port = await freePort();
    children.push(
      startWorker("worker1", 1, 3, port, { secret: SECRET, env: { TPRPC_NATIVE: "1", TPRPC_CUDA: "emulate:3" } }),
      startWorker("worker2", 2, 3, port, { secret: SECRET, env: { TPRPC_CUDA: "0" } }),
    );
    const opts = new rpc.RpcBackendOptions({
      rank: 0,
      worldSize: 3,
      initMethod: `tcp://127.0.0.1:${port}`,
      secret: SECRET,
      initTimeoutMs: 30_000,
    });
    opts.setDeviceMap("worker1", { "cuda:0": "cuda:1" });
    opts.setDeviceMap("worker1", { 1: 0 }); // cuda:1 -> cuda:0, incrementally, as PyTorch's set_device_map
    opts.setDeviceMap("worker2", { "cuda:1": "cpu" });
    await rpc.initRpc("master", opts);
    installCudaModels();
    for (const w of ["worker1", "worker2"]) await rpc.rpcSync(w, installCudaModels, [], T);
  }, 60_000);

  afterAll(async () => {
    await rpc.shutdown({ graceful: true, timeoutMs: 10_000 }).catch(() => undefined);
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
  });

  it("sends a CUDA tensor to its mapped device and takes the reply back by the inverse map, both ways", async () => {
    sdk.manualSeed(1);
    const host = sdk.randn([33, 17]);
    const info = (t: Tensor) => ({ device: t.device.toString(), y: t.mul(2) });
    for (const [here, there] of [
      ["cuda:0", "cuda:1"],
      ["cuda:1", "cuda:0"],
    ]) {
      const r = await rpc.rpcSync<{ device: string; y: Tensor }>("worker1", info, [host.to(here)], T);
      expect(r.device, `a tensor on ${here} arrives on worker1's ${there}`).toBe(there);
      expect(r.y.device.toString(), "the reply comes back by the inverse map").toBe(here);
      expect(r.y.cpu().toArray()).toEqual(host.mul(2).toArray());
    }
    // rpcAsync and remote() carry CUDA arguments the same way
    const fut = rpc.rpcAsync<Tensor>("worker1", (t: Tensor) => t.add(1), [host.to("cuda:1")], T);
    const rr = rpc.remote<Tensor>("worker1", (t: Tensor) => t.sub(1), [host.to("cuda:0")]);
    const [a, b] = await Promise.all([fut, within(rr.toHere(), 30_000, "toHere")]);
    expect([a.device.toString(), b.device.toString()]).toEqual(["cuda:1", "cuda:0"]);
    expect(a.cpu().toArray()).toEqual(host.add(1).toArray());
    expect(b.cpu().toArray()).toEqual(host.sub(1).toArray());
    const pipe = await rpc.pipeInfo("worker1");
    // NB: no CUDA driver here, so neither cuda_ipc nor nccl is viable: staging is the path
    expect(pipe.channels["cuda-cuda"]).toBe("cuda_staging");
  });

  it("moves a multi-chunk tensor and a strided CUDA view intact", async () => {
    sdk.manualSeed(2);
    const big = sdk.randn([3, 1_100_000]); // 13.2 MB: four 4 MiB staging chunks
    const echo = (t: Tensor) => ({ device: t.device.toString(), t });
    const back = await rpc.rpcSync<{ device: string; t: Tensor }>("worker1", echo, [big.to("cuda:0")], T);
    expect(back.device).toBe("cuda:1");
    expect(back.t.device.toString()).toBe("cuda:0");
    const bytes = (t: Tensor) =>
      Buffer.from(t.storage.data.buffer, t.storage.data.byteOffset, t.storage.data.byteLength);
    expect(bytes(back.t.cpu()).equals(bytes(big))).toBe(true);
    const m = sdk.randn([6, 9]);
    const view = m.to("cuda:0").t(); // non-contiguous: travels with its strides
    expect(view.isContiguous()).toBe(false);
    const v = await rpc.rpcSync<{ device: string; t: Tensor }>("worker1", echo, [view], T);
    expect(v.t.shape).toEqual([9, 6]);
    expect(v.t.cpu().toArray()).toEqual(m.t().toArray());
  });

  it("crosses between CUDA and the CPU: worker2 (no CUDA) gets host bytes, its CPU reply lands on cuda:1", async () => {
    const x = sdk.arange(0, 12, 1, { dtype: "float32" }).reshape([3, 4]);
    const f = (t: Tensor) => ({ device: t.device.toString(), y: t.add(1), n: tprpc.cuda.isAvailable() });
    const r = await rpc.rpcSync<{ device: string; y: Tensor; n: boolean }>("worker2", f, [x.to("cuda:1")], T);
    expect(r).toMatchObject({ device: "cpu", n: false });
    expect(r.y.device.toString()).toBe("cuda:1"); // the inverse map: worker2's cpu -> our cuda:1
    expect(r.y.cpu().toArray()).toEqual(x.add(1).toArray());
    // CPU tensors are not in the map: they stay on the CPU going out (the reply's cpu is mapped back)
    const c = await rpc.rpcSync<{ device: string; y: Tensor }>("worker2", f, [x], T);
    expect(c.device).toBe("cpu");
    const pipe = await rpc.pipeInfo("worker2");
    expect(pipe.channels["cuda-cpu"]).toBe("cuda_staging");
    expect(pipe.missing["cuda-cuda"]).toBeUndefined(); // worker2 has no CUDA: no such pair
  });

  it("refuses unmapped devices with a DeviceError naming the device and the callee, both ways", async () => {
    const g = sdk.ones([2]).to("cuda:0");
    // request: our cuda:0 has no mapping for worker2 (only cuda:1 has); nothing is sent
    const req = await rpc
      .rpcSync("worker2", (t: Tensor) => t, [[g]], T)
      .then(
        () => null,
        (e: unknown) => e as Error,
      );
    expect(req).toBeInstanceOf(DeviceError);
    expect(req!.message).toMatch(/destination worker2 for device cuda:0/);
    // reply: worker1's cuda:2 is not in the inverse of our map
    const rep = await rpc
      .rpcSync("worker1", () => tprpc.ones([2]).to("cuda:2"), [], T)
      .then(
        () => null,
        (e: unknown) => e as Error,
      );
    expect(rep).toBeInstanceOf(RemoteError);
    expect((rep as RemoteError).remoteName).toBe("DeviceError");
    expect(rep!.message).toMatch(/Response device mapping is not available for destination master for device cuda:2/);
    // a map that is not one-to-one is refused where it is set
    const opts = new rpc.RpcBackendOptions();
    expect(() => opts.setDeviceMap("w", { "cuda:0": "cuda:1", "cuda:1": "cuda:1" })).toThrow(ValueError);
    // the pipes are fine afterwards
    expect(await rpc.rpcSync("worker1", (a: number) => a + 1, [1], T)).toBe(2);
    expect(await rpc.rpcSync("worker2", (a: number) => a + 1, [1], T)).toBe(2);
  });

  it("fetches an RRef's CUDA value with the map applied", async () => {
    const rr = rpc.remote<Tensor>(
      "worker1",
      (n: number) => tprpc.arange(0, n, 1, { dtype: "float32" }).to("cuda:0").mul(3),
      [10],
    );
    const v = await within(rr.toHere(), 30_000, "toHere");
    expect(v.device.toString()).toBe("cuda:1"); // worker1's cuda:0 is our cuda:1 under the inverse map
    expect(v.cpu().toArray()).toEqual(sdk.arange(0, 10, 1, { dtype: "float32" }).mul(3).toArray());
    // a CUDA argument to the owner's value, through the RRef's proxy
    const sum = await rr.rpcSync().add(sdk.ones([10]).to("cuda:1"));
    expect(sum.device.toString()).toBe("cuda:1");
    expect(sum.cpu().toArray()).toEqual(v.cpu().add(1).toArray());
  });

  it("trains the CUDA-RPC recipe's two shards under distributed autograd as on the CPU", async () => {
    // The recipe's shape scaled down for the emulated device: shard 1 here, shard 2 on worker1, a
    // batch of 16 rows of 48 features, 3 iterations of forward, distributed backward and an SGD step.
    const run = async (devices: [string, string]) => {
      const local = new (localShard())(devices[0], 11, 48, 32);
      const remote = rpc.remote<InstanceType<ShardClass>>("worker1", "cudaRpc.Shard", [devices[1], 12, 32, 8]);
      const params = [
        ...local.parameters().map((p) => new rpc.RRef(p)),
        ...(await rpc.rpcSync<rpc.RRef<Tensor>[]>("worker1", "cudaRpc.paramRRefs", [remote], T)),
      ];
      const where = async (m: { toHere(): Promise<sdk.nn.Module> }) =>
        (await m.toHere()).parameters()[0]!.device.toString();
      expect(await rpc.rpcSync("worker1", where, [remote], T), "shard 2's device").toBe(devices[1]);
      const opt = new sdk.DistributedOptimizer(sdk.optim.SGD, params, { lr: 0.2 });
      sdk.manualSeed(13);
      const x = sdk.randn([16, 48]).to(devices[0]);
      const losses: number[] = [];
      let grads: number[][] = [];
      for (let i = 0; i < 3; i++)
        await sdk.distAutograd.context(async (ctxId) => {
          const out = (await remote.rpcSync().forward(local.forward(x) as never)) as Tensor;
          expect(out.device.toString()).toBe(devices[0]);
          const loss = out.mul(out).mean();
          losses.push(loss.item());
          await within(sdk.distAutograd.backward(ctxId, [loss]), 30_000, "backward");
          if (i === 0) {
            const g = sdk.distAutograd.getGradients(ctxId);
            const mine = local.parameters().map((p) => g.get(p)!);
            const theirs = await rpc.rpcSync<Tensor[]>("worker1", "cudaRpc.gradsOf", [ctxId, remote], T);
            for (const t of [...mine, ...theirs]) expect(t.device.toString()).toBe(devices[0]);
            grads = [...mine, ...theirs].map((t) => t.cpu().flatten().toArray() as number[]);
          }
          await within(opt.step(ctxId), 30_000, "step");
        });
      const after = [
        ...local.parameters().map((p) => p.cpu().flatten().toArray() as number[]),
        ...(await rpc.rpcSync<number[][]>("worker1", "cudaRpc.paramsOf", [remote], T)),
      ];
      return { losses, grads, after };
    };
    const cpu = await run(["cpu", "cpu"]);
    const cuda = await run(["cuda:0", "cuda:1"]);
    expect(cpu.losses[2]).toBeLessThan(cpu.losses[0]!); // it trains
    expectClose(cuda.losses, cpu.losses, 1e-5);
    expect(cuda.grads.length).toBe(4);
    cuda.grads.forEach((g, i) => expectClose(g, cpu.grads[i]!, 1e-5));
    cuda.after.forEach((p, i) => expectClose(p, cpu.after[i]!, 1e-5));
  });
});
