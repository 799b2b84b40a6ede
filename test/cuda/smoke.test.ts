import { expect, it } from "vitest";
import * as t from "../../sdk/index.js";
process.env.TPRPC_CUDA = "emulate";
it("smoke", () => {
  const x = t.tensor([[1, 2, 3], [4, 5, 6]], { dtype: "float32", requiresGrad: true });
  const xc = x.to("cuda:0");
  const y = xc.mul(2).add(1).exp().sum(1);
  console.log(y.device.toString(), y.cpu().toArray());
  console.log(xc.softmax(1).cpu().toArray());
  const l = xc.mul(xc).sum();
  l.backward();
  console.log(x.grad?.toArray());
  const m = new t.nn.Linear(3, 2).to("cuda:0");
  const out = m.forward(xc);
  console.log(out.device.toString(), out.cpu().toArray());
  expect(1).toBe(1);
});
