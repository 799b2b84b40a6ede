/**
 * Display helpers without a kernel and with a recording sink: tensor tables (caption,
 * values, elided middles of big tensors), the MIME-bundle protocol, progress text and
 * in-place updates under one display id, SVG line charts (one path per series, log axis,
 * bad input) and a LiveChart that redraws in place.
 */
import { afterEach, describe, expect, it } from "vitest";
import { arange, display, tensor, ValueError } from "../../sdk/index.js";

interface Shown {
  bundle: display.MimeBundle;
  displayId?: string;
  update?: boolean;
}

function record(): Shown[] {
  const shown: Shown[] = [];
  display.setDisplaySink({ display: (bundle, o) => shown.push({ bundle, ...o }) });
  return shown;
}

afterEach(() => display.setDisplaySink(null));

describe("tensor tables", () => {
  it("shows shape, dtype and every value of a small tensor", () => {
    const b = display.mimeBundle(
      tensor([
        [1.5, 2],
        [3, 4],
      ]),
    )!;
    expect(b["text/plain"]).toContain("tensor(");
    const html = b["text/html"]!;
    expect(html).toContain("Tensor [2, 2] float32 cpu");
    // NB: a caption wider than a narrow table must not wrap ("Tensor [3, / 1] float32")
    expect(html).toMatch(/<caption style="[^"]*white-space:nowrap[^"]*">Tensor \[2, 2\]/);
    for (const v of ["1.5", "2.0", "3.0", "4.0"]) expect(html).toContain(`>${v}<`);
  });

  it("elides the middle of big tensors and labels rows of 3-d tensors", () => {
    const html = display.tensorHtml(arange(100 * 100).reshape([100, 100]));
    expect(html).toContain("⋯");
    expect(html).toContain("⋮");
    expect(html).toContain(">9999<"); // the last element
    expect(html).not.toContain(">5050<"); // one in the middle
    const three = display.tensorHtml(arange(24).reshape([2, 3, 4]));
    expect(three).toContain("[1, 2]");
    expect(three).toContain(">23<");
  });

  it("reads single elements of a (transposed) tensor too big to copy whole", () => {
    const t = arange(300 * 300)
      .reshape([300, 300])
      .t();
    const html = display.tensorHtml(t);
    expect(html).toContain(">89700<"); // row 0, last column: element [299, 0] of the original
    expect(html).toContain(">299<"); // row 299, column 0
    expect(html).toContain(">89999<");
    // Row 0 of the transpose is column 0 of the original: 0, 300, 600, …
    expect(html).toMatch(/<td[^>]*>0<\/td><td[^>]*>300<\/td><td[^>]*>600<\/td>/);
  });
});

describe("display and the MIME-bundle protocol", () => {
  it("sends objects' own bundles and updates in place under one display id", () => {
    const shown = record();
    const obj = { [display.MIME_BUNDLE]: () => ({ "text/plain": "me", "text/html": "<b>me</b>" }) };
    const h = display.display(obj);
    h.update({ [display.MIME_BUNDLE]: () => ({ "text/plain": "me too" }) });
    display.display("plain text");
    expect(shown).toEqual([
      { bundle: { "text/plain": "me", "text/html": "<b>me</b>" }, displayId: h.displayId, update: false },
      { bundle: { "text/plain": "me too" }, displayId: h.displayId, update: true },
      { bundle: { "text/plain": "plain text" }, displayId: expect.any(String), update: false },
    ]);
  });
});

describe("progress", () => {
  it("draws once, then updates the same output, and ends with the final count", () => {
    const shown = record();
    const bar = display.progress(10, { label: "train", everyMs: 0 });
    for (let i = 1; i <= 10; i++) bar.update(i, { loss: 1 / i });
    bar.done();
    bar.done();
    expect(shown).toHaveLength(11);
    expect(shown[0]!.update).toBe(false);
    expect(shown.slice(1).every((s) => s.update && s.displayId === shown[0]!.displayId)).toBe(true);
    const last = shown.at(-1)!.bundle;
    expect(last["text/plain"]).toMatch(/^train done: 10\/10 \[[0-9:]+, .*it\/s\] loss=0\.1$/);
    expect(last["text/html"]).toContain('<progress value="1" ');
    expect(shown[1]!.bundle["text/html"]).toContain('<progress value="0.2" ');
  });

  it("ends finished, with a full bar, when the work stops early (a solved task, early stopping)", () => {
    const shown = record();
    const bar = display.progress(4000, { label: "episodes", everyMs: 0 });
    bar.update(604, { reward: 196 });
    expect(shown.at(-1)!.bundle["text/plain"]).toMatch(/^episodes 604\/4000 15% \[/);
    bar.done();
    const last = shown.at(-1)!.bundle;
    expect(last["text/plain"]).toMatch(
      /^episodes done: 604 of 4000 \(stopped early\) \[[0-9:]+, .*it\/s\] reward=196$/,
    );
    expect(last["text/plain"]).not.toContain("15%");
    expect(shown.at(-2)!.bundle["text/html"]).toContain('<progress value="0.151" ');
    expect(last["text/html"]).toContain('<progress value="1" ');
  });

  it("throttles redraws", () => {
    const shown = record();
    const bar = display.progress(1000, { everyMs: 60_000 });
    for (let i = 1; i <= 1000; i++) bar.update(i);
    bar.done();
    expect(shown).toHaveLength(2); // the first update and done()
  });
});

describe("line charts", () => {
  it("draws one path per series, a legend, axis labels and ticks", () => {
    const svg = display.lineChartSvg(
      { loss: [4, 2, 1, 0.5], reward: { x: [0, 10, 20], y: [0, 5, 7] } },
      { title: "curves", xLabel: "step", yLabel: "value" },
    );
    expect(svg.startsWith("<svg")).toBe(true);
    expect(svg.match(/<path /g)).toHaveLength(2);
    for (const s of ["curves", "step", "value", ">loss<", ">reward<"]) expect(svg).toContain(s);
    expect(svg).toContain(">20<"); // an x tick at the end of the domain
  });

  it("log axis drops non-positive points; a moving average adds a path; bad series throw", () => {
    const svg = display.lineChartSvg({ l: [1, 0, 0.1, 0.01, 0.001] }, { logY: true, smooth: 2 });
    expect(svg.match(/<path /g)).toHaveLength(2);
    expect(() => display.lineChartSvg({ l: { x: [1, 2], y: [1] } })).toThrow(ValueError);
    // Over several decades a log axis labels the powers of ten only.
    const decades = display.lineChartSvg({ l: [2, 0.3, 0.01, 0.0002] }, { logY: true });
    for (const t of [">1<", ">0.1<", ">0.01<", ">0.001<"]) expect(decades).toContain(t);
    expect(decades).not.toContain(">0.02<");
  });

  it("plot() sends SVG with a text summary; a LiveChart redraws in place", () => {
    const shown = record();
    display.plot({ loss: [3, 2, 1] }, { title: "t" });
    expect(shown[0]!.bundle["image/svg+xml"]).toContain("<svg");
    expect(shown[0]!.bundle["text/plain"]).toBe("[chart] t\nloss: 3 points, first 3, last 1, min 1, max 3");
    const chart = display.chart({ everyMs: 0 });
    chart.push("r", 1);
    chart.push("r", 2);
    chart.done();
    expect(shown.slice(1).map((s) => s.update)).toEqual([false, true, true]);
    expect(chart.series()).toEqual({ r: { x: [0, 1], y: [1, 2] } });
  });
});

describe("bar charts", () => {
  it("draws a bar per category and series, a legend, axis labels and value labels", () => {
    const svg = display.barChartSvg(
      ["tcp", "shm"],
      { "via host buffer": [4, 2], direct: [3, 1] },
      { title: "cost", xLabel: "channel", yLabel: "ms", unit: " ms" },
    );
    expect(svg.startsWith("<svg")).toBe(true);
    // the background, 4 bars, 2 legend swatches
    expect(svg.match(/<rect /g)).toHaveLength(7);
    for (const s of ["cost", "channel", ">ms<", ">tcp<", ">shm<", ">via host buffer<", ">direct<", ">4 ms<", ">1 ms<"])
      expect(svg).toContain(s);
    // taller values, taller bars: heights follow the values within a series
    const heights = [...svg.matchAll(/<rect x="[^"]+" y="[^"]+" width="[^"]+" height="([^"]+)" fill="#1f77b4"/g)].map(
      (m) => Number(m[1]),
    );
    expect(heights).toHaveLength(3); // two bars, then the legend's swatch
    expect(heights[0]! / heights[1]!).toBeCloseTo(2, 1);
  });

  it("bars() sends SVG with a text table; mismatched or non-finite series throw ValueError", () => {
    const shown = record();
    display.bars(["a", "b"], { x: [1, 2.5] }, { title: "t" });
    expect(shown[0]!.bundle["image/svg+xml"]).toContain("<svg");
    expect(shown[0]!.bundle["text/plain"]).toBe("[bar chart] t\na: x 1\nb: x 2.5");
    expect(() => display.barChartSvg(["a", "b"], { x: [1] })).toThrow(ValueError);
    expect(() => display.barChartSvg(["a"], { x: [NaN] })).toThrow(ValueError);
  });
});

describe("bundle filter", () => {
  afterEach(() => display.setBundleFilter(null));

  it("applies to every shown bundle and to rich objects' bundles, and can be removed", () => {
    const shown = record();
    const seen: string[] = [];
    display.setBundleFilter((b) => {
      seen.push(Object.keys(b).sort().join(","));
      return b["image/svg+xml"] ? { ...b, "image/png": "PNG" } : b;
    });
    display.plot({ l: [1, 2] });
    expect(shown[0]!.bundle["image/png"]).toBe("PNG");
    const chart = display.chart({ everyMs: 0 });
    chart.push("r", 1);
    expect(shown[1]!.bundle["image/png"]).toBe("PNG");
    expect(display.mimeBundle(chart)!["image/png"]).toBe("PNG");
    expect(seen).toContain("image/svg+xml,text/plain");
    expect(display.setBundleFilter(null)).not.toBeNull();
    display.plot({ l: [1, 2] });
    expect(shown[2]!.bundle["image/png"]).toBeUndefined();
  });
});

describe("tables", () => {
  it("lays out records by the union of their keys, with aligned text and HTML", () => {
    const b = display.tableBundle(
      [
        { round: 1, loss: 0.123456, acc: 0.5 },
        { round: 2, loss: tensor(0.25), note: "<ok>" },
      ],
      { title: "FedAvg" },
    );
    expect(b["text/plain"]).toBe(
      ["FedAvg", "round    loss  acc  note", "    1  0.1235  0.5      ", "    2    0.25       <ok>"].join("\n"),
    );
    expect(b["text/html"]).toContain('<th style="padding:1px 8px;text-align:right">note</th>');
    expect(b["text/html"]).toContain("&lt;ok&gt;");
  });
});
