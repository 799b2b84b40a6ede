/**
 * The `tprpc-kernel` command:
 *
 *   tprpc-kernel install [--user | --prefix PATH | --sys-prefix] [--name tprpc] [--display-name "..."]
 *   tprpc-kernel uninstall [--user | --prefix PATH | --sys-prefix] [--name tprpc]
 *   tprpc-kernel list
 *   tprpc-kernel kernel --config-path CONNECTION_FILE     (what Jupyter runs)
 */
import { parseArgs } from "node:util";
import { DEFAULT_NAME, install, list, uninstall } from "./kernelspec.js";

const USAGE = `usage: tprpc-kernel install [--user | --prefix PATH | --sys-prefix] [--name NAME] [--display-name TEXT]
       tprpc-kernel uninstall [--user | --prefix PATH | --sys-prefix] [--name NAME]
       tprpc-kernel list
       tprpc-kernel kernel --config-path CONNECTION_FILE`;

/** Runs the command; returns the exit code (the kernel command never returns). */
export async function main(argv: readonly string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  const { values } = parseArgs({
    args: [...rest],
    options: {
      user: { type: "boolean" },
      prefix: { type: "string" },
      "sys-prefix": { type: "boolean" },
      name: { type: "string" },
      "display-name": { type: "string" },
      "config-path": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  const loc = { user: values.user, prefix: values.prefix, sysPrefix: values["sys-prefix"] };
  switch (cmd) {
    case "install": {
      const dir = install({ ...loc, name: values.name, displayName: values["display-name"] });
      process.stdout.write(`installed kernelspec ${values.name ?? DEFAULT_NAME} in ${dir}\n`);
      return 0;
    }
    case "uninstall": {
      const dir = uninstall({ ...loc, name: values.name });
      process.stdout.write(dir ? `removed ${dir}\n` : `no kernelspec ${values.name ?? DEFAULT_NAME} there\n`);
      return dir ? 0 : 1;
    }
    case "list": {
      const specs = list();
      if (!specs.length) process.stdout.write("no tprpc kernelspec installed (run: npx tprpc-kernel install)\n");
      for (const s of specs) process.stdout.write(`${s.name}\t${s.dir}\t(${s.displayName}; package ${s.root})\n`);
      return 0;
    }
    case "kernel": {
      if (!values["config-path"]) throw new Error(`kernel needs --config-path\n${USAGE}`);
      const { startKernel } = await import("./kernel.js");
      startKernel(values["config-path"]);
      return -1;
    }
    default:
      process.stderr.write(`${USAGE}\n`);
      return values.help ? 0 : 2;
  }
}
