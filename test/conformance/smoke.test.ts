/** The harness itself: a group of 3 workers meets, and every worker answers. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rpc } from "../../sdk/index.js";
import { type Group, startGroup, stopGroup } from "./group.js";

// NB: shipped functions run on the callee against the SDK namespace, named `tprpc` there.
declare const tprpc: typeof import("../../sdk/index.js");

describe("conformance harness", () => {
  let cluster: Group | undefined;
  beforeAll(async () => {
    cluster = await startGroup();
  }, 40_000);
  afterAll(() => stopGroup(cluster), 20_000);

  it("starts a group of four", async () => {
    expect(rpc.workers().map((w) => w.name)).toEqual(["master", "worker1", "worker2", "worker3"]);
    const names = await Promise.all(
      [1, 2, 3].map((i) => rpc.rpcSync(`worker${i}`, () => tprpc.rpc.getWorkerInfo().name)),
    );
    expect(names).toEqual(["worker1", "worker2", "worker3"]);
  });
});
