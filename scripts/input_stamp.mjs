// A stamp of a step's inputs, so that `npm test` can skip a step whose inputs are byte for byte those of
// its last passing run: the test set-up's tsc builds (test/global-setup.ts) and the lint steps that have
// no cache of their own (scripts/lint.mjs: ESLint, whose promise rules read types across files, and the
// layer check). The stamp is a SHA-256 over every input file's path and content, in a fixed order, plus
// the step's command line: a file added, removed, renamed or edited, or another option, gives another
// stamp. Stamps live in dist/.cache/ (removed with dist/; a clean clone has none, so runs everything).
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";

/** Folders never walked into: installed packages, build output, Python's and git's own. */
const SKIP = new Set(["node_modules", "dist", "build", ".git", "__pycache__", ".venv"]);

/** Every file under `dir` (relative to `root`, "/"-separated, sorted) whose name passes `keep`. */
function walk(root, dir, keep, out) {
  let entries;
  try {
    entries = fs.readdirSync(path.join(root, dir), { withFileTypes: true });
  } catch {
    return; // NB: a folder that does not exist has no inputs
  }
  for (const e of entries) {
    const rel = dir ? `${dir}/${e.name}` : e.name;
    if (e.isDirectory()) {
      if (!SKIP.has(e.name)) walk(root, rel, keep, out);
    } else if (e.isFile() && keep(rel)) out.push(rel);
  }
}

/**
 * The stamp of `inputs`: folders (walked; `keep` filters their files by path) and single files (a
 * missing one counts as absent, which differs from empty), with `extra` (a command line, versions).
 */
export function inputStamp(root, { dirs = [], files = [], keep = () => true, extra = [] }) {
  const all = [];
  for (const d of dirs) walk(root, d, keep, all);
  const h = crypto.createHash("sha256");
  for (const x of extra) h.update(`extra\0${x}\0`);
  for (const rel of [...new Set([...all, ...files])].sort()) {
    let bytes;
    try {
      bytes = fs.readFileSync(path.join(root, rel));
    } catch {
      h.update(`absent\0${rel}\0`);
      continue;
    }
    h.update(`file\0${rel}\0${bytes.length}\0`);
    h.update(bytes);
  }
  return h.digest("hex");
}

const stampFile = (root, name) => path.join(root, "dist/.cache", `${name}.stamp`);

/** Whether `name`'s last pass was recorded with this `stamp`. */
export function passedWith(root, name, stamp) {
  try {
    return fs.readFileSync(stampFile(root, name), "utf8") === stamp;
  } catch {
    return false;
  }
}

/** Records that `name` passed with `stamp`; `forget` removes the record (a failed or interrupted run). */
export function recordPass(root, name, stamp) {
  fs.mkdirSync(path.dirname(stampFile(root, name)), { recursive: true });
  fs.writeFileSync(stampFile(root, name), stamp);
}

export function forget(root, name) {
  fs.rmSync(stampFile(root, name), { force: true });
}
