/**
 * A PNG beside every SVG the kernel shows (tprpc.display's charts, or any image/svg+xml bundle).
 *
 * Why: `jupyter nbconvert --to html` (nbconvert 6.5, as Debian ships it) cleans every output with lxml,
 * which drops inline SVG's children (and data:image/svg+xml URLs), so exported charts came out blank;
 * it also prefers image/svg+xml over image/png. A PNG data URL in an <img> survives. So a bundle with
 * SVG and without HTML or PNG gains:
 *   - image/png: the SVG rasterized at 2× (sharp on high-DPI screens), for exporters that take PNG;
 *   - text/html: `<img src="data:image/png;base64,…" width height alt>` at the SVG's size. Jupyter
 *     front ends and nbconvert's HTML both rank text/html first, so the live notebook and the exported
 *     HTML show the same picture.
 * The SVG stays in the bundle.
 *
 * The rasterizer is @resvg/resvg-js (resvg, a Rust SVG renderer, as a prebuilt Node-API binary for
 * each platform; ~4 MB installed on linux-x64), loaded on first use. It is a dependency of the kernel,
 * not of the SDK: plain Node programs using tprpc never load it. Without it (a platform with no
 * prebuilt binary) the bundles stay SVG-only and the kernel says so once on stderr.
 */
import { createRequire } from "node:module";
import * as tprpc from "tprpc";

const require = createRequire(import.meta.url);

interface Resvg {
  render(): { asPng(): Buffer; width: number; height: number };
}
interface ResvgModule {
  Resvg: new (svg: string, options?: object) => Resvg;
}

/** Pixels per SVG unit in the PNG. */
export const PNG_SCALE = 2;

let resvg: ResvgModule | null | undefined;
let warned = false;
const stderrWrite = process.stderr.write.bind(process.stderr);

function loadResvg(): ResvgModule | null {
  if (resvg === undefined) {
    try {
      resvg = require("@resvg/resvg-js") as ResvgModule;
    } catch (e) {
      resvg = null;
      stderrWrite(`[tprpc:kernel] no PNG renderings of charts (@resvg/resvg-js: ${(e as Error).message})\n`);
    }
  }
  return resvg;
}

/** The SVG as a PNG at PNG_SCALE, with the SVG's own size; null when no rasterizer loads or the SVG is bad. */
export function svgToPng(svg: string): { png: Buffer; width: number; height: number } | null {
  const mod = loadResvg();
  if (!mod) return null;
  try {
    const img = new mod.Resvg(svg, {
      fitTo: { mode: "zoom", value: PNG_SCALE },
      background: "white",
      // NB: resvg maps the generic "sans-serif" to Arial; DejaVu Sans is what Debian (and Chromium there) has.
      font: { loadSystemFonts: true, defaultFontFamily: "DejaVu Sans", sansSerifFamily: "DejaVu Sans" },
    }).render();
    return {
      png: img.asPng(),
      width: Math.round(img.width / PNG_SCALE),
      height: Math.round(img.height / PNG_SCALE),
    };
  } catch (e) {
    if (!warned) stderrWrite(`[tprpc:kernel] an SVG output could not be rasterized: ${(e as Error).message}\n`);
    warned = true;
    return null;
  }
}

function escapeAttr(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

/** The bundle with image/png and an HTML <img> of it beside its SVG (see the file's top); else the same bundle. */
export function withPng(bundle: tprpc.display.MimeBundle): tprpc.display.MimeBundle {
  const svg = bundle["image/svg+xml"];
  if (svg === undefined || bundle["image/png"] !== undefined || bundle["text/html"] !== undefined) return bundle;
  const r = svgToPng(svg);
  if (!r) return bundle;
  const b64 = r.png.toString("base64");
  const alt = (bundle["text/plain"] ?? "chart").split("\n")[0]!;
  return {
    ...bundle,
    "image/png": b64,
    "text/html": `<img src="data:image/png;base64,${b64}" width="${r.width}" height="${r.height}" alt="${escapeAttr(alt)}">`,
  };
}

/** Makes every bundle the kernel shows carry a PNG beside its SVG. */
export function installPngRenderings(): void {
  tprpc.display.setBundleFilter(withPng);
}
