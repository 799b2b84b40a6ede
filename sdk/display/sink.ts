/**
 * Where rich output goes. In a notebook the tprpc kernel installs a sink that
 * sends Jupyter display_data / update_display_data messages; in a plain Node
 * process there is none, and display() prints the text/plain form to stdout.
 *
 *   display.display(x);                       // a tensor renders as a table
 *   const h = display.display(bundle, { displayId: "loss" });
 *   h.update(newBundle);                       // replaces that output in place
 *
 * An object renders richly when it has a method under the symbol `MIME_BUNDLE`
 * returning a MIME bundle (the cluster, charts, progress bars do); a Tensor
 * renders as a compact table.
 */
import { inspect } from "node:util";
import { Tensor } from "../tensor/tensor.js";
import { tensorBundle } from "./tensor_table.js";

/** MIME type -> content, as in a Jupyter display_data message ("text/plain" is always there). */
export type MimeBundle = Record<string, string>;

/** Objects that render themselves: `[MIME_BUNDLE]()` returns their MIME bundle. */
export const MIME_BUNDLE: unique symbol = Symbol.for("tprpc.display.mimeBundle") as never;

export interface RichDisplayable {
  [MIME_BUNDLE](): MimeBundle;
}

export interface DisplayOptions {
  /** Names this output so that later update() calls replace it in place. */
  displayId?: string;
  /** true: replace the output shown earlier under displayId instead of adding a new one. */
  update?: boolean;
}

/** What a notebook kernel provides (kernel-ext installs one with setDisplaySink). */
export interface DisplaySink {
  display(bundle: MimeBundle, opts: DisplayOptions): void;
}

let sink: DisplaySink | null = null;

/** Installs (or, with null, removes) the sink; returns the previous one. */
export function setDisplaySink(s: DisplaySink | null): DisplaySink | null {
  const prev = sink;
  sink = s;
  return prev;
}

/** True inside a kernel that renders rich output. */
export function hasDisplaySink(): boolean {
  return sink !== null;
}

/**
 * Adds renderings to a bundle before it is shown: the tprpc kernel installs one that puts a PNG (and an
 * HTML <img> of it) beside each SVG, because exported notebooks (nbconvert 6.5's HTML) strip inline SVG.
 * It returns a new bundle (or the same one when it has nothing to add) and must not throw.
 */
export type BundleFilter = (bundle: MimeBundle) => MimeBundle;

let filter: BundleFilter | null = null;

/** Installs (or, with null, removes) the bundle filter; returns the previous one. */
export function setBundleFilter(f: BundleFilter | null): BundleFilter | null {
  const prev = filter;
  filter = f;
  return prev;
}

/** The rich MIME bundle of `value`, or null when it has none (then util.inspect is its text form). */
export function mimeBundle(value: unknown): MimeBundle | null {
  if (value instanceof Tensor) return tensorBundle(value);
  if (
    value !== null &&
    typeof value === "object" &&
    typeof (value as Partial<RichDisplayable>)[MIME_BUNDLE] === "function"
  ) {
    const b = (value as RichDisplayable)[MIME_BUNDLE]();
    return filter ? filter(b) : b;
  }
  return null;
}

/** A MIME bundle for any value: its rich form, else util.inspect as text/plain. */
export function toBundle(value: unknown): MimeBundle {
  if (typeof value === "string") return { "text/plain": value };
  return mimeBundle(value) ?? { "text/plain": inspect(value, { colors: false, depth: 4 }) };
}

let nextId = 0;

/** A fresh display id (unique within this process). */
export function newDisplayId(prefix = "tprpc"): string {
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${nextId++}`;
}

/** A shown output that can be replaced in place. */
export interface DisplayHandle {
  readonly displayId: string;
  update(value: unknown): void;
}

/** Shows `value` (a MIME bundle is sent as it is when passed with opts.raw) and returns a handle to update it. */
export function display(value: unknown, opts: DisplayOptions & { raw?: boolean } = {}): DisplayHandle {
  const displayId = opts.displayId ?? newDisplayId();
  const bundleOf = (v: unknown): MimeBundle => (opts.raw ? (v as MimeBundle) : toBundle(v));
  emit(bundleOf(value), { displayId, update: opts.update ?? false });
  return {
    displayId,
    update: (v: unknown) => emit(bundleOf(v), { displayId, update: true }),
  };
}

/** Sends a bundle to the sink, or prints its text to stdout (new outputs only) without one. */
export function emit(bundle: MimeBundle, opts: DisplayOptions): void {
  if (sink) sink.display(filter ? filter(bundle) : bundle, opts);
  else if (!opts.update) process.stdout.write(`${bundle["text/plain"] ?? ""}\n`);
}

/** Shows an HTML fragment (with a text/plain fallback). */
export function html(markup: string, text = "[HTML output]"): DisplayHandle {
  return display({ "text/html": markup, "text/plain": text }, { raw: true });
}

/** Escapes text for HTML content and attribute values. */
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}
