/**
 * The kernel's PNG renderings (kernel-ext/png.ts): a chart's bundle gains image/png (2×) and an HTML
 * <img> of it at the SVG's size, and that <img> survives the lxml cleaning that nbconvert 6.5's HTML
 * export applies to every output (which empties inline SVG: the reason for the PNG). Bundles that
 * already have HTML or PNG, or no SVG, are left alone.
 */
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { PNG_SCALE, withPng } from "../../kernel-ext/png.js";
import { display } from "../../sdk/index.js";

/** Width and height from a PNG's IHDR chunk. */
function pngSize(b64: string): [number, number] {
  const buf = Buffer.from(b64, "base64");
  expect(buf.subarray(0, 8).toString("hex")).toBe("89504e470d0a1a0a");
  return [buf.readUInt32BE(16), buf.readUInt32BE(20)];
}

describe("withPng", () => {
  it("adds a 2x PNG and an <img> at the SVG's size to line and bar charts, keeping the SVG", () => {
    for (const b of [
      display.lineChartBundle({ loss: [3, 2, 1] }, { title: "loss <1>", width: 500, height: 250 }),
      display.barChartBundle(["a", "b"], { x: [1, 2] }, { title: "bars", width: 500, height: 250 }),
    ]) {
      const out = withPng(b);
      expect(out["image/svg+xml"]).toBe(b["image/svg+xml"]);
      expect(out["text/plain"]).toBe(b["text/plain"]);
      expect(pngSize(out["image/png"]!)).toEqual([500 * PNG_SCALE, 250 * PNG_SCALE]);
      expect(out["text/html"]).toBe(
        `<img src="data:image/png;base64,${out["image/png"]}" width="500" height="250" alt="${b["text/plain"]!.split("\n")[0]!.replace(/</g, "&lt;").replace(/>/g, "&gt;")}">`,
      );
    }
  });

  it("leaves bundles with HTML, with PNG or without SVG as they are", () => {
    const svg = display.lineChartSvg({ l: [1, 2] });
    const bundles: display.MimeBundle[] = [
      { "image/svg+xml": svg, "text/html": "<b>mine</b>", "text/plain": "x" },
      { "image/svg+xml": svg, "image/png": "AAAA", "text/plain": "x" },
      { "text/plain": "x" },
    ];
    for (const b of bundles) expect(withPng(b)).toBe(b);
  });

  it("its <img> survives nbconvert 6.5's output cleaning (lxml clean_html), which empties inline SVG", () => {
    const b = withPng(display.lineChartBundle({ loss: [3, 2, 1] }, { title: "t" }));
    const clean = (html: string) =>
      execFileSync(
        "/usr/bin/python3",
        ["-c", "import sys; from lxml.html.clean import clean_html; sys.stdout.write(clean_html(sys.stdin.read()))"],
        { input: html, encoding: "utf8", timeout: 30_000 },
      );
    expect(clean(b["text/html"]!)).toBe(b["text/html"]);
    expect(clean(`<div>${b["image/svg+xml"]}</div>`)).not.toContain("<path");
  });
});
