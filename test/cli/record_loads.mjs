// Preloaded with `node --import` by cli.test.ts: appends to the file named by $TPRPC_RECORD_LOADS a line
// "load URL" for every ES module the process loads (a module.register hook) and "dlopen PATH" for every
// native addon it opens (process.dlopen, which CommonJS's .node loader and node-gyp-build go through).
import fs from "node:fs";
import { register } from "node:module";

const out = process.env.TPRPC_RECORD_LOADS;
if (!out) throw new Error("record_loads.mjs: set TPRPC_RECORD_LOADS to the file to write");

const dlopen = process.dlopen;
process.dlopen = function (module, filename, ...rest) {
  fs.appendFileSync(out, `dlopen ${filename}\n`);
  return dlopen.call(this, module, filename, ...rest);
};

// NB: the hooks run on their own thread; they append to the same file.
const hooks = `import fs from "node:fs";
export async function load(url, context, next) {
  fs.appendFileSync(${JSON.stringify(out)}, "load " + url + "\\n");
  return next(url, context);
}`;
register(`data:text/javascript,${encodeURIComponent(hooks)}`);
