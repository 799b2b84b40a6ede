/**
 * The nccl channel over the addon's native NCCL binding (sdk/channel/nccl/native_driver.ts,
 * native/src/gpu/nccl.cc, libnccl.so.2 by dlopen) in two real processes
 * (fixtures/gpu-channel-pair.mjs), against a stand-in libnccl compiled here with cc
 * (./nccl_lib_standin.ts: ranks meet and exchange bytes through files) over the stand-in libcuda
 * (./cuda_standin.ts). This checks the bootstrap (unique id from rank 0, both ranks' init results),
 * the point-to-point calls and the bytes, and that a failed rank makes both sides fail together with
 * NcclError. NB: NCCL needs one GPU per rank, so no lent (one-GPU) machine can run the real thing.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildStandInDriver } from "./cuda_standin.js";
import { buildStandInNccl } from "./nccl_lib_standin.js";
import { nativeOrSkip, runFixture } from "./helpers.js";

const { native, skip } = nativeOrSkip();
/** A real libnccl on the loader path would be found whatever LD_LIBRARY_PATH says. */
const systemNccl = spawnSync("sh", ["-c", "ldconfig -p | grep -q 'libnccl\\.so'"]).status === 0;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-nccl-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

interface ErrorInfo {
  name: string;
  message: string;
  result?: number;
  call?: string;
}

describe.skipIf(skip !== null)("nccl over the addon, two processes, stand-in libnccl", () => {
  let libs = "";
  beforeAll(() => {
    const cuda = buildStandInDriver(path.join(tmp, "cuda"), native!.libraryTable().cuda.symbols);
    const nccl = buildStandInNccl(path.join(tmp, "nccl"));
    libs = `${cuda}:${nccl}`;
  });
  const run = <T>(name: string, env: Record<string, string> = {}): { result: T; log: string[] } => {
    const dir = path.join(tmp, name);
    fs.mkdirSync(dir);
    const file = path.join(dir, "calls.log");
    const { result } = runFixture<T>("gpu-channel-pair.mjs", ["nccl"], {
      env: {
        LD_LIBRARY_PATH: libs,
        STANDIN_LOG: file,
        STANDIN_NAME: "A",
        STANDIN_NCCL_DIR: dir,
        STANDIN_EVENTS_DONE: "1",
        ...env,
      },
    });
    return { result, log: fs.readFileSync(file, "utf8").trim().split("\n") };
  };

  it("sets up a two-rank communicator and moves bytes both ways, in order", () => {
    const { result, log } = run<{ viable: { viable: boolean }; sentIntact: boolean; backIntact: boolean }>("ok");
    expect(result.viable.viable).toBe(true);
    expect(result).toMatchObject({ sentIntact: true, backIntact: true });
    const nccl = log.filter((l) => / nccl/.test(l));
    expect(nccl.filter((l) => l.includes("ncclinit")).sort()).toEqual(["A ncclinit 0/2", "B ncclinit 1/2"]);
    // A (rank 0) sends to 1, B receives from 0; then B sends 3 MB back to 0. Each side closes idle: destroy.
    const order = (who: string): string[] => nccl.filter((l) => l.startsWith(who) && !l.includes("ncclinit"));
    expect(order("A")).toEqual([
      "A ncclgroupstart",
      "A ncclgroupend",
      "A ncclsend 1000 1",
      "A ncclrecv 3000000 1",
      "A nccldestroy",
    ]);
    expect(order("B")).toEqual(["B ncclrecv 1000 0", "B ncclsend 3000000 0", "B nccldestroy"]);
  });

  it("a rank whose ncclCommInitRank fails makes both sides fall back to cuda_staging, together", () => {
    const { result, log } = run<{ channel: string; peer: { channel: string } }>("fail", {
      CHILD_STANDIN_NCCL_FAIL_RANK: "1",
      STANDIN_NCCL_TIMEOUT_MS: "1500",
      PAIR_REPORT_CHANNEL: "1",
    });
    expect(result.channel).toBe("cuda_staging");
    expect(result.peer.channel).toBe("cuda_staging");
    // Rank 1's init failed; rank 0 learnt it from rank 1's verdict while its own init was still blocked.
    expect(log.filter((l) => l.includes("ncclinit")).sort()).toEqual(["A ncclinit 0/2", "B ncclinit 1/2"]);
    expect(log.filter((l) => l.includes("ncclsend") || l.includes("ncclrecv"))).toEqual([]);
  });

  it("an NCCL that lacks ncclSend is not viable, with the reason, and nothing crashes", () => {
    const old = buildStandInNccl(path.join(tmp, "nccl-old"), ["ncclSend"]);
    const p = runFixture<{ ncclChannel: { viable: boolean; why: string } }>("gpu-channel-pair.mjs", ["probe"], {
      env: { LD_LIBRARY_PATH: `${libs.split(":")[0]!}:${old}` },
    }).result;
    expect(p.ncclChannel.viable).toBe(false);
    expect(p.ncclChannel.why).toMatch(/^nccl needs libnccl: .*lacks 1 required symbol\(s\): ncclSend/);
  });

  it.skipIf(systemNccl)("without libnccl the context is not viable and says why", () => {
    const cuda = libs.split(":")[0]!;
    const p = runFixture<{ nccl: { viable: boolean }; ncclChannel: { viable: boolean; why: string } }>(
      "gpu-channel-pair.mjs",
      ["probe"],
      { env: { LD_LIBRARY_PATH: cuda } },
    ).result;
    expect(p.ncclChannel.viable).toBe(false);
    expect(p.ncclChannel.why).toMatch(/^nccl needs libnccl: nccl is not installed or not on the loader path/);
  });
});
