/**
 * Distributed autograd state belongs to an agent, not to the process: with
 * several agents in one process (test/rpc/in_process.ts), a context the pass
 * touches on two of them is two contexts, each holding its own worker's send
 * nodes and leaf gradients, counted and released per agent. (With one
 * process-wide table the callee's leaf gradient showed up in the caller's
 * getGradients, and the context counts were shared.)
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Agent } from "../../sdk/rpc/agent.js";
import { distAutograd } from "../../sdk/index.js";
import { settled } from "../helpers.js";
import { inProcessGroup, stopInProcessGroup } from "../rpc/in_process.js";

declare const tprpc: typeof import("../../sdk/index.js");

describe("distributed autograd with several agents in one process", () => {
  let agents: Agent[] = [];
  beforeAll(async () => {
    agents = await inProcessGroup(["a", "b", "c"]);
  }, 20_000);
  afterAll(() => stopInProcessGroup(agents, false), 20_000);

  it("keeps each agent's contexts, send nodes and leaf gradients apart", async () => {
    // on b: a pass through c, where c multiplies by a leaf of its own (w, 3s)
    const pass = () =>
      tprpc.distAutograd.context(async (ctxId) => {
        const x = tprpc.tensor([1, 2], { dtype: "float32", requiresGrad: true });
        const y = await tprpc.rpc.rpcSync(
          "c",
          (t: import("../../sdk/index.js").Tensor) => {
            const g = globalThis as { __perAgentW?: import("../../sdk/index.js").Tensor };
            g.__perAgentW ??= tprpc.tensor([3, 3], { dtype: "float32", requiresGrad: true });
            return [t.mul(g.__perAgentW), tprpc.distAutograd.contextCount()];
          },
          [x],
        );
        const [prod, countOnC] = y as [import("../../sdk/index.js").Tensor, number];
        await tprpc.distAutograd.backward(ctxId, [prod.sum()]);
        const mine = tprpc.distAutograd.getGradients(ctxId);
        // c's share of the context: its own leaf's gradient (x's values), not b's
        const onC = await tprpc.rpc.rpcSync(
          "c",
          (id: number) => [...tprpc.distAutograd.getGradients(id).values()].map((g) => g.toArray()),
          [ctxId],
        );
        return {
          ctxId,
          worker: Math.floor(ctxId / 2 ** 32),
          mine: [...mine.values()].map((g) => g.toArray()),
          onC,
          countOnB: tprpc.distAutograd.contextCount(),
          countOnC,
        };
      });
    const r = (await agents[0]!.call("b", pass, [])) as {
      worker: number;
      mine: number[][];
      onC: number[][];
      countOnB: number;
      countOnC: number;
    };
    expect(r.worker).toBe(1); // b's rank in the id's high bits
    expect(r.mine).toEqual([[3, 3]]); // x's gradient only
    expect(r.onC).toEqual([[1, 2]]); // w's gradient, on c only
    expect([r.countOnB, r.countOnC]).toEqual([1, 1]);
    // released on both when the callback returned; a never took part
    // NB: c hears of it from b, after b's context() returned (b does not await its peers' answers)
    const counts = () =>
      Promise.all(["a", "b", "c"].map((n) => agents[0]!.call(n, () => tprpc.distAutograd.contextCount(), [])));
    expect(await settled(counts, [0, 0, 0])).toEqual([0, 0, 0]);
    // nothing leaked into the process's own (agent-less) state either
    expect(distAutograd.contextCount()).toBe(0);
  });
});
