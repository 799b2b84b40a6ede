/**
 * README.md's Environment tables against the source: every environment variable the code reads
 * (sdk/, kernel-ext/, bin/, native/src/, native/build.mjs, scripts/) has a row in the first table,
 * and every row there is still read. The second table (test suites and benchmarks) is curated: each
 * of its rows must still be read under test/ or bench/, and every TPRPC_* variable read there must
 * be in one of the tables, unless it is plumbing a test sets for its own child processes.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const THIS_FILE = path.relative(repoRoot, fileURLToPath(import.meta.url));

/** Where the package's code lives (files or folders, relative to the repository root). */
const CODE_ROOTS = ["sdk", "kernel-ext", "bin", "native/src", "native/build.mjs", "scripts"];
/** Where the test suites and benchmarks live (bench/ once it moves out of test/). */
const TEST_ROOTS = ["test", "bench"];
/** TPRPC_* variables a test sets for a child process it starts itself: not for users. */
const TEST_PLUMBING = new Set(["TPRPC_PEER_HOST", "TPRPC_RDZV_MODULE", "TPRPC_RECORD_LOADS"]);

/**
 * Helpers that read `process.env[name]` for a name passed as their first argument, by file. A
 * dynamic read anywhere else fails the scan, so that a new helper is taught here rather than missed.
 */
const ENV_HELPERS: Record<string, string[]> = {
  "sdk/channel/tcp/index.ts": ["envInt"],
};

const JS_EXT = /\.(ts|mts|cts|js|mjs|cjs)$/;
const C_EXT = /\.(cc|cpp|c|h|hpp)$/;
const PY_EXT = /\.py$/;
const SH_EXT = /\.(sh|bash)$/;

const NAME = String.raw`[A-Za-z_][A-Za-z0-9_]*`;
/** Not an assignment: `process.env.X = v` writes (`==` / `===` still read). */
const NOT_WRITE = String.raw`(?!\s*=[^=])`;

interface Scan {
  names: Set<string>;
  /** Dynamic reads (`process.env[k]`) that no known helper covers, as "file:line". */
  unknownDynamic: string[];
}

function lineOf(text: string, index: number): number {
  return text.slice(0, index).split("\n").length;
}

/** The environment variables one source file reads. */
function scanSource(file: string, text: string, helpers: string[] = ENV_HELPERS[file] ?? []): Scan {
  const names = new Set<string>();
  const unknownDynamic: string[] = [];
  const add = (re: RegExp, group = 1) => {
    for (const m of text.matchAll(re)) names.add(m[group]!);
  };
  if (JS_EXT.test(file)) {
    // process.env.X, process.env?.X, and a ProcessEnv parameter or copy named env: env.X (upper case)
    add(new RegExp(String.raw`\bprocess\.env\??\.(${NAME})\b${NOT_WRITE}`, "g"));
    add(new RegExp(String.raw`(?<![\w.])env\??\.([A-Z_][A-Z0-9_]*)\b${NOT_WRITE}`, "g"));
    // process.env["X"], env['X']
    add(new RegExp(String.raw`\b(?:process\.env|(?<![\w.])env)\??\.?\[\s*["'\`](${NAME})["'\`]\s*\]${NOT_WRITE}`, "g"));
    // npm's own variables, wherever a copy of the environment is read (e.npm_config_nodedir)
    add(/\.(npm_config_[a-z0-9_]+)\b(?!\s*=[^=])/g);
    // const { A, B: b, C = "x" } = process.env
    for (const m of text.matchAll(/\{([^{}]*)\}\s*=\s*(?:process\.env|env)\b/g))
      for (const part of m[1]!.split(",")) {
        const key = part.trim().match(new RegExp(`^(?:\\.\\.\\.)?(${NAME})`));
        if (key && !part.trim().startsWith("...")) names.add(key[1]!);
      }
    // dynamic reads: process.env[k] / env[k] with something other than a string literal
    for (const m of text.matchAll(/\b(?:process\.env|(?<![\w.])env)\??\.?\[\s*([^\]"'`\s][^\]]*)\]/g)) {
      if (helpers.length === 0) unknownDynamic.push(`${file}:${lineOf(text, m.index)}`);
    }
    for (const h of helpers) add(new RegExp(String.raw`\b${h}\(\s*["'\`](${NAME})["'\`]`, "g"));
  } else if (C_EXT.test(file)) {
    add(new RegExp(String.raw`\b(?:secure_)?getenv\(\s*"(${NAME})"\s*\)`, "g"));
  } else if (PY_EXT.test(file)) {
    add(new RegExp(String.raw`\bos\.(?:environ\.get|getenv)\(\s*["'](${NAME})["']`, "g"));
    add(new RegExp(String.raw`\bos\.environ\[\s*["'](${NAME})["']\s*\]${NOT_WRITE}`, "g"));
  } else if (SH_EXT.test(file)) {
    // ${X:-default}, ${X-default}, ${X:?msg}: the shell idioms for reading an outside variable
    add(new RegExp(String.raw`\$\{(${NAME}):?[-?=+]`, "g"));
  }
  return { names, unknownDynamic };
}

function walk(rel: string, out: string[]): void {
  const abs = path.join(repoRoot, rel);
  if (!fs.existsSync(abs)) return;
  const st = fs.statSync(abs);
  if (st.isFile()) {
    if ([JS_EXT, C_EXT, PY_EXT, SH_EXT].some((re) => re.test(rel))) out.push(rel);
    return;
  }
  for (const e of fs.readdirSync(abs, { withFileTypes: true })) {
    if (e.name === "node_modules" || e.name.startsWith(".")) continue;
    walk(path.join(rel, e.name), out);
  }
}

/** The variables read under `roots`, each with the files that read it. */
function scanTree(roots: string[], skip: (file: string) => boolean = () => false) {
  const files: string[] = [];
  for (const r of roots) walk(r, files);
  const where = new Map<string, string[]>();
  const unknownDynamic: string[] = [];
  for (const file of files.map((f) => f.split(path.sep).join("/")).filter((f) => !skip(f))) {
    const scan = scanSource(file, fs.readFileSync(path.join(repoRoot, file), "utf8"));
    unknownDynamic.push(...scan.unknownDynamic);
    for (const n of scan.names) where.set(n, [...(where.get(n) ?? []), file]);
  }
  return { where, unknownDynamic, files };
}

interface EnvTables {
  /** The first table: the package's variables. */
  code: string[];
  /** The table after "### For the test suites and benchmarks". */
  tests: string[];
}

/** The variable names in README.md's "## Environment" tables (first cell of each row, in backticks). */
function parseEnvTables(readme: string): EnvTables {
  const start = readme.search(/^## Environment\s*$/m);
  if (start < 0) throw new Error('README.md has no "## Environment" section');
  const rest = readme.slice(start + 1);
  const end = rest.search(/^## /m);
  const section = end < 0 ? rest : rest.slice(0, end);
  const split = section.search(/^### For the test suites/m);
  const rows = (text: string) =>
    text
      .split("\n")
      .filter((l) => /^\|/.test(l) && !/^\|\s*-/.test(l) && !/^\|\s*Variable\s*\|/.test(l))
      .flatMap((l) => [...l.split("|")[1]!.matchAll(/`([^`]+)`/g)].map((m) => m[1]!));
  return {
    code: rows(split < 0 ? section : section.slice(0, split)),
    tests: split < 0 ? [] : rows(section.slice(split)),
  };
}

function duplicates(xs: string[]): string[] {
  return [...new Set(xs.filter((x, i) => xs.indexOf(x) !== i))];
}

describe("the source scan", () => {
  it("finds every form of read", () => {
    const ts = [
      "const a = process.env.TS_DOT ?? 1;",
      "const b = process.env['TS_SINGLE'];",
      'const c = process.env["TS_DOUBLE"];',
      "const d = process.env?.TS_OPTIONAL;",
      "function f(env: NodeJS.ProcessEnv = process.env) { return env.TS_PARAM; }",
      "const { TS_DESTR_A, TS_DESTR_B: renamed, TS_DESTR_C = 'x' } = process.env;",
      "const e = { ...process.env }; if (e.npm_config_dummy) {}",
      "if (process.env.TS_CMP === '1') {}",
    ].join("\n");
    expect([...scanSource("sdk/x.ts", ts).names].sort()).toEqual(
      [
        "TS_CMP",
        "TS_DESTR_A",
        "TS_DESTR_B",
        "TS_DESTR_C",
        "TS_DOT",
        "TS_DOUBLE",
        "TS_OPTIONAL",
        "TS_PARAM",
        "TS_SINGLE",
        "npm_config_dummy",
      ].sort(),
    );
    const cc = 'const char* v = std::getenv("CC_STD");\nif (getenv("CC_PLAIN")) {}\nsecure_getenv("CC_SECURE");';
    expect([...scanSource("native/src/x.cc", cc).names].sort()).toEqual(["CC_PLAIN", "CC_SECURE", "CC_STD"]);
    const py = 'a = os.environ.get("PY_GET")\nb = os.getenv("PY_GETENV")\nc = os.environ["PY_INDEX"]';
    expect([...scanSource("scripts/x.py", py).names].sort()).toEqual(["PY_GET", "PY_GETENV", "PY_INDEX"]);
    expect([...scanSource("scripts/x.sh", 'echo "${SH_DEFAULT:-x}" "${SH_EMPTY-}" "$local"').names].sort()).toEqual([
      "SH_DEFAULT",
      "SH_EMPTY",
    ]);
  });

  it("ignores writes, C++ Napi::Env and options objects", () => {
    const ts = "process.env.TS_WRITE = 'x';\nconst o = opts.env.NOT_ENV;\nconst u = env.lowercase;";
    expect([...scanSource("sdk/x.ts", ts).names]).toEqual([]);
    expect([...scanSource("native/src/x.cc", 'return env.Undefined();\nsetenv("CC_SET", "no", 0);').names]).toEqual([]);
    expect([...scanSource("scripts/x.py", 'os.environ["PY_WRITE"] = "1"').names]).toEqual([]);
  });

  it("reads names through known helpers, and flags unknown dynamic reads", () => {
    const ts = "function envInt(name: string) { return process.env[name]; }\nenvInt('TS_HELPER', 2);";
    const known = scanSource("sdk/x.ts", ts, ["envInt"]);
    expect([...known.names]).toEqual(["TS_HELPER"]);
    expect(known.unknownDynamic).toEqual([]);
    expect(scanSource("sdk/x.ts", ts, []).unknownDynamic).toEqual(["sdk/x.ts:1"]);
  });

  it("parses the README tables and catches a missing or stale row", () => {
    const readme = [
      "## Environment",
      "",
      "| Variable | Default | What it does |",
      "| --- | --- | --- |",
      "| `A_VAR` | `1` | a `B_NOT_A_NAME` in prose |",
      "| `C_VAR` | none | c |",
      "",
      "### For the test suites and benchmarks",
      "",
      "| Variable | Default | What it does |",
      "| --- | --- | --- |",
      "| `T_VAR` | unset | t |",
      "",
      "## Next",
      "| `NOT_IN_SECTION` | | |",
    ].join("\n");
    const t = parseEnvTables(readme);
    expect(t).toEqual({ code: ["A_VAR", "C_VAR"], tests: ["T_VAR"] });
    const read = new Set(["A_VAR", "D_VAR"]);
    expect([...read].filter((n) => !t.code.includes(n))).toEqual(["D_VAR"]);
    expect(t.code.filter((n) => !read.has(n))).toEqual(["C_VAR"]);
  });
});

describe("README.md's Environment tables", () => {
  const readme = fs.readFileSync(path.join(repoRoot, "README.md"), "utf8");
  const tables = parseEnvTables(readme);
  const code = scanTree(CODE_ROOTS);
  const tests = scanTree(TEST_ROOTS, (f) => f === THIS_FILE);

  it("the scan covers the code (sanity: it finds the variables it must)", () => {
    expect(code.files.length).toBeGreaterThan(50);
    for (const n of ["RANK", "TPRPC_SECRET", "TPRPC_POOL_BYTES", "TPRPC_TCP_LANES", "TPRPC_NATIVE_STRICT"])
      expect(code.where.has(n), n).toBe(true);
  });

  it("every dynamic env read goes through a known helper", () => {
    expect(code.unknownDynamic, "teach ENV_HELPERS in test/docs/env_table.test.ts about these").toEqual([]);
  });

  it("lists every variable the code reads, and only those", () => {
    const missing = [...code.where.keys()]
      .filter((n) => !tables.code.includes(n))
      .sort()
      .map((n) => `${n} (read in ${code.where.get(n)!.join(", ")})`);
    const stale = tables.code.filter((n) => !code.where.has(n));
    const listedTwice = duplicates(tables.code);
    // NB: one assertion, so that a failure names every problem at once
    expect(
      { missing, stale, listedTwice },
      "missing: read by the code but not in README.md's Environment table; stale: in the table but no longer read",
    ).toEqual({ missing: [], stale: [], listedTwice: [] });
  });

  it("the test-suite table lists only variables the tests read, and all their TPRPC_* knobs", () => {
    expect(tables.tests.length).toBeGreaterThan(0);
    const stale = tables.tests.filter((n) => !tests.where.has(n));
    const inBothTables = tables.tests.filter((n) => tables.code.includes(n));
    const missing = [...tests.where.keys()]
      .filter((n) => n.startsWith("TPRPC_") && !TEST_PLUMBING.has(n))
      .filter((n) => !tables.code.includes(n) && !tables.tests.includes(n))
      .sort()
      .map((n) => `${n} (read in ${tests.where.get(n)!.join(", ")})`);
    const listedTwice = duplicates(tables.tests);
    expect(
      { missing, stale, inBothTables, listedTwice },
      "missing: a TPRPC_* variable read under test/ or bench/ in neither table; stale: in the test-suite table but not read there",
    ).toEqual({ missing: [], stale: [], inBothTables: [], listedTwice: [] });
  });
});
