/**
 * Counting what a browser really painted: an element's screenshot, decoded in the page itself (an
 * <img> drawn on a canvas), and its pixels compared with the background colour.
 */
import type { ElementHandle, Page } from "playwright-core";

// NB: functions passed to page.evaluate run in the browser; the project compiles without the DOM lib, so its
// names are declared here for this file only.
declare const window: any, document: any, Image: any;

export interface Painted {
  width: number;
  height: number;
  /** Pixels that are not (near) white. */
  painted: number;
  /** Distinct colours among them, quantized to 4 bits a channel. */
  colors: number;
}

/** Screenshots `el` (PNG, also written to `file`) and counts its non-background pixels. */
export async function paintedPixels(page: Page, el: ElementHandle, file: string): Promise<Painted> {
  const png = await el.screenshot({ path: file, timeout: 15_000 });
  return page.evaluate(async (b64: string) => {
    const img = new Image();
    img.src = `data:image/png;base64,${b64}`;
    await img.decode();
    const c = document.createElement("canvas");
    c.width = img.naturalWidth;
    c.height = img.naturalHeight;
    const g = c.getContext("2d")!;
    g.drawImage(img, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let painted = 0;
    const colors = new Set<number>();
    for (let i = 0; i < d.length; i += 4) {
      if (d[i]! > 240 && d[i + 1]! > 240 && d[i + 2]! > 240) continue;
      painted++;
      colors.add(((d[i]! >> 4) << 8) | ((d[i + 1]! >> 4) << 4) | (d[i + 2]! >> 4));
    }
    return { width: c.width, height: c.height, painted, colors: colors.size };
  }, png.toString("base64"));
}

/** A chart counts as drawn when over 1% of its pixels are painted in at least 3 colours (axes, text, a series). */
export function looksDrawn(p: Painted): boolean {
  return p.width >= 100 && p.height >= 50 && p.painted > 0.01 * p.width * p.height && p.colors >= 3;
}
