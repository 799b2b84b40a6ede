/**
 * The `tprpc-kernel` command:
 *
 *   tprpc-kernel install [--user | --prefix PATH | --sys-prefix] [--name tprpc] [--display-name "..."]
 *   tprpc-kernel uninstall [--user | --prefix PATH | --sys-prefix] [--name tprpc]
 *   tprpc-kernel list [--user | --prefix PATH | --sys-prefix]
 *   tprpc-kernel kernel --config-path CONNECTION_FILE     (what Jupyter runs)
 *
 * `-h` / `--help` (anywhere) prints the usage on stdout, exit 0; no command prints it on stderr, exit 2
 * (as npm, git and argparse-style tools); an unknown command or option, or an option missing its value,
 * is one line naming it plus the usage on stderr, exit 2. A kernelspec that cannot be written (a bad
 * name, two locations) is one line, exit 1.
 *
 * NB: install / uninstall / list import only ./kernelspec.js (no SDK, no native addon); the kernel
 * command imports ./kernel.js, and with it the SDK, when it runs.
 */
import fs from "node:fs";
import { parseArgs } from "node:util";
import {
  DEFAULT_NAME,
  DEFAULT_DISPLAY_NAME,
  KernelspecError,
  install,
  list,
  packagePaths,
  uninstall,
} from "./kernelspec.js";

type OptionSpec = { type: "string" | "boolean"; value?: string; help: string };

function location(user: string): Record<string, OptionSpec> {
  return {
    user: { type: "boolean", help: user },
    prefix: { type: "string", value: "PATH", help: "PATH/share/jupyter" },
    "sys-prefix": { type: "boolean", help: "the active virtualenv / conda env, or python3's sys.prefix" },
  };
}
const LOCATION = location("the per-user Jupyter folder (the default)");

interface Command {
  synopsis: string;
  about: string;
  options: Record<string, OptionSpec>;
}

const COMMANDS: Record<string, Command> = {
  install: {
    synopsis: "tprpc-kernel install [--user | --prefix PATH | --sys-prefix] [--name NAME] [--display-name TEXT]",
    about: "Registers the Jupyter kernel (writes <folder>/kernels/NAME/kernel.json); no Python tooling needed.",
    options: {
      ...LOCATION,
      name: { type: "string", value: "NAME", help: `the kernelspec's name (default ${DEFAULT_NAME})` },
      "display-name": {
        type: "string",
        value: "TEXT",
        help: `the name Jupyter shows (default "${DEFAULT_DISPLAY_NAME}")`,
      },
    },
  },
  uninstall: {
    synopsis: "tprpc-kernel uninstall [--user | --prefix PATH | --sys-prefix] [--name NAME]",
    about: "Removes the kernelspec NAME from that folder; exit 1 when there was none.",
    options: {
      ...LOCATION,
      name: { type: "string", value: "NAME", help: `the kernelspec's name (default ${DEFAULT_NAME})` },
    },
  },
  list: {
    synopsis: "tprpc-kernel list [--user | --prefix PATH | --sys-prefix]",
    about:
      "Lists the tprpc kernelspecs Jupyter sees (JUPYTER_PATH, the per-user folder, /usr/local/share/jupyter,\n" +
      "/usr/share/jupyter); with a location flag, only those in that folder.",
    options: location("the per-user Jupyter folder"),
  },
  kernel: {
    synopsis: "tprpc-kernel kernel --config-path CONNECTION_FILE",
    about: "Runs the kernel (what a kernelspec's kernel.json starts; Jupyter passes the connection file).",
    options: { "config-path": { type: "string", value: "FILE", help: "the connection file Jupyter wrote" } },
  },
};

const USAGE = `usage: ${Object.values(COMMANDS)
  .map((c) => c.synopsis)
  .join("\n       ")}`;

const HELP = `${USAGE}

Registers, removes and lists the tprpc Jupyter kernel ("${DEFAULT_DISPLAY_NAME}"), and runs it.

commands:
  install     register the kernel
  uninstall   remove it
  list        list the tprpc kernelspecs Jupyter sees
  kernel      run the kernel (Jupyter does, through kernel.json)

options:
  -h, --help  print this help (or a command's: tprpc-kernel install --help) and exit
  --version   print tprpc's version and exit
`;

function commandHelp(c: Command): string {
  const rows = Object.entries(c.options).map(([k, o]) => [`--${k}${o.value ? ` ${o.value}` : ""}`, o.help]);
  rows.push(["-h, --help", "print this help and exit"]);
  const w = Math.max(...rows.map(([l]) => l!.length)) + 2;
  return `usage: ${c.synopsis}\n\n${c.about}\n\noptions:\n${rows.map(([l, h]) => `  ${l!.padEnd(w)}${h}`).join("\n")}\n`;
}

/** A command line that cannot be run: the message names what was wrong; exit 2 with the usage. */
class UsageError extends Error {}

const HELP_OPTION = { help: { type: "boolean", short: "h" } } as const;

/**
 * util.parseArgs, with its errors (unknown option, missing value, stray argument) as one-line UsageErrors.
 * NB: parsed non-strict with tokens, so that `-h` / `--help` wins over any other mistake, as in argparse.
 */
function parse(args: readonly string[], options: Record<string, OptionSpec>) {
  const { values, tokens } = parseArgs({
    args: [...args],
    options: { ...Object.fromEntries(Object.entries(options).map(([k, o]) => [k, { type: o.type }])), ...HELP_OPTION },
    strict: false,
    allowPositionals: true,
    tokens: true,
  });
  if (values.help === true) return { help: true, values };
  for (const t of tokens) {
    if (t.kind === "positional") throw new UsageError(`unexpected argument "${t.value}"`);
    else if (t.kind === "option") {
      const o = options[t.name];
      if (!o) throw new UsageError(`unknown option ${t.rawName}`);
      // NB: `--prefix --user` takes "--user" as the value; refuse it, as parseArgs' strict mode does.
      if (o.type === "string" && (t.value === undefined || (!t.inlineValue && /^(--|-h$)/.test(t.value))))
        throw new UsageError(`${t.rawName} needs a value (${t.rawName} ${o.value})`);
      if (o.type === "boolean" && t.inlineValue) throw new UsageError(`${t.rawName} takes no value`);
    }
  }
  return { help: false, values };
}

function version(): string {
  const pkg = JSON.parse(fs.readFileSync(`${packagePaths().root}/package.json`, "utf8")) as { version: string };
  return `${pkg.version}\n`;
}

/** Runs the command; returns the exit code (the kernel command never returns). */
export async function main(argv: readonly string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  const command = cmd === undefined ? undefined : COMMANDS[cmd];
  let where = "tprpc-kernel";
  try {
    if (!command) {
      if (cmd !== undefined && !cmd.startsWith("-")) throw new UsageError(`unknown command "${cmd}"`);
      // No command: the top-level flags, or a usage error.
      const { help, values } = parse(argv, { version: { type: "boolean", help: "" } });
      if (help) return (process.stdout.write(HELP), 0);
      if (values.version) return (process.stdout.write(version()), 0);
      process.stderr.write(`${USAGE}\n(tprpc-kernel --help for more)\n`);
      return 2;
    }
    where = `tprpc-kernel ${cmd}`;
    const { help, values } = parse(rest, command.options);
    if (help) return (process.stdout.write(commandHelp(command)), 0);
    const str = (k: string) => values[k] as string | undefined;
    const bool = (k: string) => values[k] as boolean | undefined;
    const loc = { user: bool("user"), prefix: str("prefix"), sysPrefix: bool("sys-prefix") };
    switch (cmd) {
      case "install": {
        const dir = install({ ...loc, name: str("name"), displayName: str("display-name") });
        process.stdout.write(`installed kernelspec ${str("name") ?? DEFAULT_NAME} in ${dir}\n`);
        return 0;
      }
      case "uninstall": {
        const dir = uninstall({ ...loc, name: str("name") });
        process.stdout.write(dir ? `removed ${dir}\n` : `no kernelspec ${str("name") ?? DEFAULT_NAME} there\n`);
        return dir ? 0 : 1;
      }
      case "list": {
        const specs = list(loc);
        const located = loc.user || loc.prefix || loc.sysPrefix;
        if (!specs.length)
          process.stdout.write(
            `no tprpc kernelspec installed${located ? " there" : ""} (run: npx tprpc-kernel install)\n`,
          );
        for (const s of specs) process.stdout.write(`${s.name}\t${s.dir}\t(${s.displayName}; package ${s.root})\n`);
        return 0;
      }
      default: {
        const configPath = str("config-path");
        if (!configPath) throw new UsageError("--config-path is required");
        const { startKernel } = await import("./kernel.js");
        (await import("./png.js")).installPngRenderings();
        startKernel(configPath);
        return -1;
      }
    }
  } catch (e) {
    if (e instanceof KernelspecError) {
      process.stderr.write(`${where}: ${e.message}\n`);
      return 1;
    }
    if (!(e instanceof UsageError)) throw e;
    process.stderr.write(`${where}: ${e.message}\n${command ? `usage: ${command.synopsis}` : USAGE}\n`);
    return 2;
  }
}
