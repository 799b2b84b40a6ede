#!/usr/bin/env node
// The `tprpc-kernel` command (install / uninstall / list the Jupyter kernelspec, and the kernel itself);
// see kernel-ext/cli.ts. It runs the compiled kernel in this package's dist/.
import { fileURLToPath } from "node:url";

const cli = new URL("../dist/cli.js", import.meta.url);
let main;
try {
  ({ main } = await import(cli.href));
} catch (e) {
  console.error(`tprpc-kernel: cannot load ${fileURLToPath(cli)} (${e?.message ?? e}); build it with: npm run build`);
  process.exit(1);
}
main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (e) => {
    console.error(`tprpc-kernel: ${e?.message ?? e}`);
    process.exit(1);
  },
);
