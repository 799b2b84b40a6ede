/**
 * `npm run test:browser` — the notebooks in a real browser. CI runs it after
 * `npm run notebooks`, whose executed copies (dist/notebooks/*.ipynb) it exports.
 *
 * 1. Live: Debian's Jupyter Notebook server (scripts/browser-test/notebook_server.ts) and headless
 *    Chromium (/usr/bin/chromium, driven by playwright-core), both started here. 00_quickstart.ipynb,
 *    copied to a temporary folder, is opened and run with the UI's Cell > Run All. A MutationObserver
 *    records every state the progress bar and the loss chart take: both must be replaced in place
 *    (one of each at the end) after showing at least one intermediate state, the bar must end full,
 *    no cell may show an error, and the chart must have painted pixels.
 * 2. Exported: each executed notebook goes through `jupyter nbconvert --to html` (nbconvert 6.5's
 *    default template) and is opened from file:// (every other request refused). Each chart output of
 *    the notebook (a bundle with image/svg+xml) must be an <img> there with painted pixels, and each
 *    progress bar must show its final state.
 * Screenshots (the live page, the live chart, each exported chart and progress bar) go to
 * dist/screenshots/. Every wait is bounded. Exit codes: 0 passed, 1 a check failed, 2 setup failed.
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, type Browser, type Page } from "playwright-core";
import { BrowserTestSetupError, startNotebookServer } from "./notebook_server.js";
import { looksDrawn, paintedPixels } from "./pixels.js";

// NB: functions passed to page.evaluate run in the browser; the project compiles without the DOM lib, so its
// names are declared here for this file only.
declare const window: any, document: any, MutationObserver: any;

const CHROMIUM = "/usr/bin/chromium";
const CHROMIUM_FLAGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

function repoRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!fs.existsSync(path.join(dir, "package.json"))) dir = path.dirname(dir);
  return dir;
}

const log = (line: string) => process.stderr.write(`[browser] ${line}\n`);
const failures: string[] = [];
function check(ok: boolean, what: string): void {
  log(`${ok ? "ok" : "FAILED"}: ${what}`);
  if (!ok) failures.push(what);
}

/** The final loss chart's <img> src, live and in 00_quickstart's export. */
let liveChartSrc: string | null = null;
let exportChartSrc: string | null = null;

/** What the page's MutationObserver saw while the cells ran. */
interface Seen {
  progress: number[];
  charts: string[];
}

async function live(browser: Browser, root: string, shots: string): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-live-"));
  fs.copyFileSync(path.join(root, "notebooks", "00_quickstart.ipynb"), path.join(dir, "00_quickstart.ipynb"));
  const t0 = performance.now();
  const server = await startNotebookServer(dir);
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  try {
    log(`notebook server up in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    await page.goto(`${server.baseUrl}/notebooks/00_quickstart.ipynb?token=${server.token}`, { timeout: 60_000 });
    // NB: the kernel takes seconds to start; the UI shows it idle once it answered kernel_info.
    await page.waitForFunction(
      () => {
        const k = (window as unknown as { Jupyter?: { notebook?: { kernel?: { is_connected?: () => boolean } } } })
          .Jupyter?.notebook?.kernel;
        return !!k?.is_connected?.() && !!document.querySelector("#kernel_indicator_icon.kernel_idle_icon");
      },
      undefined,
      { timeout: 90_000, polling: 200 },
    );
    log(`notebook open, kernel idle after ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    await page.evaluate(() => {
      const seen = { progress: [] as number[], charts: [] as string[] };
      (window as unknown as { __seen: Seen }).__seen = seen;
      const scan = () => {
        for (const p of document.querySelectorAll(".output_area progress"))
          if (seen.progress.at(-1) !== p.value) seen.progress.push(p.value);
        for (const img of document.querySelectorAll('.output_area img[alt^="[chart] training loss"]'))
          if (seen.charts.at(-1) !== img.src) seen.charts.push(img.src);
      };
      new MutationObserver(scan).observe(document.querySelector("#notebook-container")!, {
        subtree: true,
        childList: true,
        attributes: true,
      });
    });
    // Run every cell through the UI: Cell > Run All.
    await page.locator("#menus a.dropdown-toggle", { hasText: /^\s*Cell\s*$/ }).click({ timeout: 10_000 });
    await page.locator("#run_all_cells > a").click({ timeout: 10_000 });
    const tRun = performance.now();
    let midShot = false;
    for (;;) {
      const state = await page.evaluate(() => {
        const nb = (
          window as unknown as {
            Jupyter: { notebook: { get_cells(): { cell_type: string; input_prompt_number?: unknown }[] } };
          }
        ).Jupyter.notebook;
        const code = nb.get_cells().filter((c) => c.cell_type === "code");
        return {
          pending: code.filter((c) => typeof c.input_prompt_number !== "number").length,
          errors: document.querySelectorAll(".output_error").length,
          idle: !!document.querySelector("#kernel_indicator_icon.kernel_idle_icon"),
          training: [...document.querySelectorAll(".output_area progress")].some((p) => p.value > 0 && p.value < 1),
        };
      });
      if (state.training && !midShot) {
        midShot = true;
        await page.screenshot({ path: path.join(shots, "live-00-while-training.png"), timeout: 15_000 });
      }
      if (state.errors || (state.pending === 0 && state.idle)) break;
      if (performance.now() - tRun > 240_000) {
        check(false, `00_quickstart ran all cells within 240 s (${state.pending} still pending)`);
        break;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    log(`cells ran in ${((performance.now() - tRun) / 1000).toFixed(1)} s`);
    // NB: the notebook scrolls inside #site, not the document: a viewport as tall as the notebook shows it whole.
    const tall = await page.evaluate(() => document.querySelector("#notebook").scrollHeight + 150);
    await page.setViewportSize({ width: 1280, height: Math.min(Number(tall) || 900, 12_000) });
    await page.waitForTimeout(500);
    await page.screenshot({ path: path.join(shots, "live-00-quickstart.png"), timeout: 30_000 });
    const errors = await page.locator(".output_error").allInnerTexts();
    check(errors.length === 0, `no cell of 00_quickstart shows an error${errors.length ? `: ${errors[0]}` : ""}`);
    const seen = await page.evaluate(() => (window as unknown as { __seen: Seen }).__seen);
    const bars = page.locator(".output_area progress");
    check((await bars.count()) === 1, `one progress bar at the end (updated in place), found ${await bars.count()}`);
    const mid = seen.progress.filter((v) => v > 0 && v < 1);
    check(
      mid.length >= 1 && seen.progress.at(-1) === 1,
      `the progress bar updated live and ended full (values seen: ${seen.progress.map((v) => v.toFixed(3)).join(", ")})`,
    );
    const charts = page.locator('.output_area img[alt^="[chart] training loss"]');
    check((await charts.count()) === 1, `one loss chart at the end (redrawn in place), found ${await charts.count()}`);
    check(seen.charts.length >= 2, `the loss chart was redrawn live (${seen.charts.length} pictures seen)`);
    if ((await charts.count()) === 1) {
      liveChartSrc = await charts.first().getAttribute("src");
      const p = await paintedPixels(page, await charts.first().elementHandle()!, path.join(shots, "live-00-chart.png"));
      check(looksDrawn(p), `the live loss chart has painted pixels (${JSON.stringify(p)})`);
    }
  } finally {
    await page.close();
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Outputs of an executed notebook that are charts (SVG) or progress bars. */
function expectedOutputs(file: string): { charts: number; progress: number } {
  const nb = JSON.parse(fs.readFileSync(file, "utf8")) as {
    cells: { outputs?: { data?: Record<string, string | string[]> }[] }[];
  };
  let charts = 0;
  let progress = 0;
  for (const c of nb.cells)
    for (const o of c.outputs ?? []) {
      if (o.data?.["image/svg+xml"] !== undefined) {
        charts++;
        check(o.data["image/png"] !== undefined, `${path.basename(file)}: chart output ${charts} carries image/png`);
      }
      const html = o.data?.["text/html"];
      if ((Array.isArray(html) ? html.join("") : (html ?? "")).includes("<progress")) progress++;
    }
  return { charts, progress };
}

async function exported(browser: Browser, root: string, shots: string): Promise<void> {
  const executed = path.join(root, "dist", "notebooks");
  const files = fs.existsSync(executed)
    ? fs
        .readdirSync(executed)
        .filter((f) => f.endsWith(".ipynb"))
        .sort()
        .map((f) => path.join(executed, f))
    : [];
  if (!files.length)
    throw new BrowserTestSetupError(`no executed notebooks in ${executed}: run \`npm run notebooks\` first`);
  const out = fs.mkdtempSync(path.join(os.tmpdir(), "tprpc-export-"));
  try {
    const t0 = performance.now();
    execFileSync("/usr/bin/python3", ["-m", "nbconvert", "--to", "html", "--output-dir", out, ...files], {
      stdio: ["ignore", "ignore", "pipe"],
      timeout: 180_000,
    });
    log(`nbconvert --to html of ${files.length} notebooks in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    for (const file of files) {
      const name = path.basename(file, ".ipynb");
      const want = expectedOutputs(file);
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      try {
        // NB: the template links require.js and MathJax from a CDN; nothing but the file itself may load.
        await page.route("**/*", (r) => (r.request().url().startsWith("file:") ? r.continue() : r.abort()));
        await page.goto(`file://${path.join(out, `${name}.html`)}`, { waitUntil: "load", timeout: 60_000 });
        const imgs = page.locator('img[src^="data:image/png"]');
        const n = await imgs.count();
        check(n === want.charts, `${name}: ${want.charts} charts exported as images, found ${n}`);
        if (name === "00_quickstart" && n > 0) exportChartSrc = await imgs.first().getAttribute("src");
        for (let i = 0; i < n; i++) {
          const el = (await imgs.nth(i).elementHandle())!;
          await el.scrollIntoViewIfNeeded({ timeout: 10_000 });
          const p = await paintedPixels(page, el, path.join(shots, `export-${name}-chart${i + 1}.png`));
          check(looksDrawn(p), `${name}: exported chart ${i + 1} has painted pixels (${JSON.stringify(p)})`);
        }
        const bars = page.locator("progress");
        const m = await bars.count();
        check(m === want.progress, `${name}: ${want.progress} progress bars exported, found ${m}`);
        for (let i = 0; i < m; i++) {
          const bar = bars.nth(i);
          const value = await bar.evaluate((p: { value: number }) => p.value);
          const text = await bar.evaluate((p) => p.parentElement?.textContent ?? "");
          await bar
            .locator("xpath=..")
            .screenshot({ path: path.join(shots, `export-${name}-progress${i + 1}.png`), timeout: 15_000 });
          check(
            value === 1 && /done/.test(text),
            `${name}: exported progress bar ${i + 1} shows its final state (value ${value}; "${text.trim()}")`,
          );
        }
      } finally {
        await page.close();
      }
    }
  } finally {
    fs.rmSync(out, { recursive: true, force: true });
  }
}

async function main(): Promise<number> {
  const root = repoRoot();
  const shots = path.join(root, "dist", "screenshots");
  fs.rmSync(shots, { recursive: true, force: true });
  fs.mkdirSync(shots, { recursive: true });
  if (!fs.existsSync(CHROMIUM))
    throw new BrowserTestSetupError(
      `no Chromium at ${CHROMIUM}: apt-get install chromium (bash scripts/setup.sh does)`,
    );
  const t0 = performance.now();
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_FLAGS, timeout: 60_000 });
  try {
    await live(browser, root, shots);
    await exported(browser, root, shots);
    // Informational: 00_quickstart is seeded, so its loss chart should be the very same PNG live and exported.
    if (liveChartSrc && exportChartSrc)
      log(
        `00_quickstart's loss chart, live and exported: ${liveChartSrc === exportChartSrc ? "the same PNG" : "different PNGs (different data)"}`,
      );
  } finally {
    await browser.close();
  }
  log(
    `${failures.length ? `${failures.length} check(s) FAILED` : "all checks passed"} in ${((performance.now() - t0) / 1000).toFixed(1)} s; screenshots in ${path.relative(process.cwd(), shots)}/`,
  );
  return failures.length ? 1 : 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  main().then(
    (code) => process.exit(code),
    (e: unknown) => {
      log(e instanceof BrowserTestSetupError ? e.message : ((e as Error).stack ?? String(e)));
      process.exit(2);
    },
  );
}
