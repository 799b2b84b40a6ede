/**
 * `npm run demo`: a tour of the tensor / autograd / nn / optim API, seeded, in about a second.
 *
 * 1. Tensors and a gradient by hand: d/da sum(a * a) = 2a.
 * 2. A tiny MLP (4 -> 8 -> 1) learns y = x·w with SGD; the loss printed every 25 steps falls.
 * Exits 1 if the loss did not fall, so the demo doubles as a smoke test. (Later, the notebooks
 * replace this script as the main walk-through.)
 */
import { manualSeed, nn, noGrad, optim, randn, tensor } from "../sdk/index.js";

manualSeed(0);

// 1. Tensors and autograd.
const a = tensor(
  [
    [1, 2],
    [3, 4],
  ],
  { dtype: "float32", requiresGrad: true }, // NB: integer literals alone would make an int64 tensor, as in torch
);
const s = a.mul(a).sum();
s.backward();
console.log(`a =\n${a}`);
console.log(`sum(a * a) = ${s.item()}`);
console.log(`d sum(a * a) / da = 2a =\n${a.grad}`);

// 2. A tiny regression: targets from a fixed linear map, a two-layer MLP fits them.
const x = randn([64, 4]);
const wTrue = tensor([[1], [-2], [0.5], [3]]);
const y = x.matmul(wTrue);

const model = new nn.Sequential(new nn.Linear(4, 8), new nn.ReLU(), new nn.Linear(8, 1));
const lossFn = new nn.MSELoss();
const opt = new optim.SGD(model.parameters(), { lr: 0.1 });

const evalLoss = (): number => noGrad(() => lossFn.forward(model.forward(x), y).item());
const first = evalLoss();
console.log(`\nMLP 4-8-1, SGD lr 0.1, 64 samples; loss before training ${first.toFixed(4)}`);
for (let step = 1; step <= 100; step++) {
  opt.zeroGrad();
  const loss = lossFn.forward(model.forward(x), y);
  loss.backward();
  opt.step();
  if (step % 25 === 0) console.log(`step ${String(step).padStart(3)}  loss ${loss.item().toFixed(4)}`);
}
const final = evalLoss();
console.log(`loss after training ${final.toFixed(4)} (${((100 * (first - final)) / first).toFixed(1)}% lower)`);
if (!(final < first)) {
  console.error("demo: the loss did not fall; something is wrong with autograd, nn or optim");
  process.exit(1);
}
