/**
 * Notebook display helpers (`display` in "tprpc"): rich output for tensors and
 * other objects, tables of records, in-place progress bars, SVG line and bar charts. Inside the tprpc
 * kernel they render as Jupyter outputs; in a plain Node process they fall back
 * to text.
 */
export {
  type MimeBundle,
  type RichDisplayable,
  type DisplayOptions,
  type DisplaySink,
  type DisplayHandle,
  type BundleFilter,
  setBundleFilter,
  MIME_BUNDLE,
  setDisplaySink,
  hasDisplaySink,
  mimeBundle,
  toBundle,
  display,
  html,
  newDisplayId,
} from "./sink.js";
export { tensorHtml, tensorBundle } from "./tensor_table.js";
export { Progress, progress, type ProgressOptions } from "./progress.js";
export { table, tableBundle, type TableOptions } from "./table.js";
export { LiveChart, chart, plot, lineChartSvg, lineChartBundle, type ChartOptions, type SeriesData } from "./chart.js";
export { bars, barChartSvg, barChartBundle, type BarChartOptions } from "./bar_chart.js";
