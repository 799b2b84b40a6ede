#!/usr/bin/env node
// The type check and ESLint's promise rules on one TypeScript program (a step of scripts/lint.mjs).
// Both need the whole program of tsconfig.check.json: tsc to check it, typescript-eslint's promise rules
// to ask its checker whether an expression is a promise. Run apart, each builds it (about 8 s of CPU here,
// a third of the two steps together); here tsc builds it once and ESLint is handed it (typescript-eslint's
// `programs` option instead of the config's `project`). `npm run typecheck` and `npm run eslint` still run
// each on its own. Prints each one's verdict like the other lint steps, and exits 1 when either failed.
import path from "node:path";
import { ESLint } from "eslint";
import ts from "typescript";

const root = path.resolve(import.meta.dirname, "..");
const LINTED = ["sdk", "kernel-ext", "scripts", "test", "bench"];
let ok = true;

const secs = (t0) => ((performance.now() - t0) / 1000).toFixed(1);
let t0 = performance.now();
const configHost = {
  ...ts.sys,
  onUnRecoverableConfigFileDiagnostic: (d) => {
    throw new Error(ts.flattenDiagnosticMessageText(d.messageText, "\n"));
  },
};
const parsed = ts.getParsedCommandLineOfConfigFile(path.join(root, "tsconfig.check.json"), {}, configHost);
const program = ts.createProgram({
  rootNames: parsed.fileNames,
  options: parsed.options,
  projectReferences: parsed.projectReferences,
  configFileParsingDiagnostics: parsed.errors,
});
const diagnostics = ts.getPreEmitDiagnostics(program);
if (diagnostics.length > 0) {
  ok = false;
  const host = { getCanonicalFileName: (f) => f, getCurrentDirectory: () => root, getNewLine: () => "\n" };
  process.stdout.write(ts.formatDiagnosticsWithColorAndContext(diagnostics, host));
}
process.stdout.write(`lint: typecheck ${diagnostics.length === 0 ? "passed" : "FAILED"} in ${secs(t0)} s\n`);

t0 = performance.now();
const eslint = new ESLint({
  cwd: root,
  overrideConfig: { languageOptions: { parserOptions: { project: null, programs: [program] } } },
});
const results = await eslint.lintFiles(LINTED);
// NB: as ESLint's command line: warnings are printed, errors fail
const failed = results.some((r) => r.errorCount > 0 || r.fatalErrorCount > 0);
if (failed) ok = false;
if (results.some((r) => r.messages.length > 0))
  process.stdout.write((await eslint.loadFormatter("stylish")).format(results));
process.stdout.write(`lint: eslint ${failed ? "FAILED" : "passed"} in ${secs(t0)} s (${results.length} files)\n`);
process.exit(ok ? 0 : 1);
