#!/usr/bin/env node
// The type check and ESLint's promise rules on one TypeScript program (a step of scripts/lint.mjs).
// Both need the whole program of tsconfig.check.json: tsc to check it, typescript-eslint's promise rules
// to ask its checker whether an expression is a promise. Run apart, each builds it (about 8 s of CPU here,
// a third of the two steps together); here tsc builds it once and ESLint is handed it (typescript-eslint's
// `programs` option instead of the config's `project`). `npm run typecheck` and `npm run eslint` still run
// each on its own. Prints each one's verdict like the other lint steps, and exits 1 when either failed.
//
// --emit (`npm test` on a cold tree, scripts/test.mjs): first emit the test build's dist/ from this same
// program, which tsc -p tsconfig.json would otherwise build again from scratch before any suite could start
// (about 10 s of CPU here, a third of a cold run's lint and build together), and the kernel package's
// kernel-ext/dist, then tell the parent (an IPC message, { built: true }) and go on with the checks. The
// program's options are tsconfig.json's (tsconfig.check.json only adds noEmit and more files; the kernel's
// config only its folders), so the files emitted are those tsc would write; the tests are never emitted.
import path from "node:path";
import { ESLint } from "eslint";
import ts from "typescript";
import { PROJECTS, buildInputs, recordBuilt } from "./test_build.mjs";

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
const emit = process.argv.includes("--emit");
// NB: before the program reads them, so that a source saved meanwhile is not recorded as built
const inputs = emit ? buildInputs(root) : "";
const program = ts.createProgram({
  rootNames: parsed.fileNames,
  options: emit ? { ...parsed.options, noEmit: false } : parsed.options,
  projectReferences: parsed.projectReferences,
  configFileParsingDiagnostics: parsed.errors,
});
/** The compiler options in which `a` and `b` differ, but for noEmit and those that only place files or map "tprpc". */
function optionsDiffer(a, b) {
  const placing = new Set(["noEmit", "paths", "pathsBasePath", "rootDir", "outDir", "configFilePath"]);
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...keys].filter((k) => !placing.has(k) && JSON.stringify(a[k]) !== JSON.stringify(b[k]));
}

if (emit) {
  const t1 = performance.now();
  // NB: per project of the test build, its files and where this program's outDir puts them against where
  // the project's own does (the kernel's: dist/kernel-ext/x.js here, kernel-ext/dist/x.js there); both
  // compared byte for byte with tsc's own output when this was written
  let clean = program.getOptionsDiagnostics().length === 0 && program.getGlobalDiagnostics().length === 0;
  let count = 0;
  for (const p of PROJECTS) {
    const config = ts.getParsedCommandLineOfConfigFile(path.join(root, p.config), {}, configHost);
    // NB: only where the project's options are this program's, but for those that place files and resolve
    // "tprpc" (the kernel's resolves it to the SDK's .d.ts, this program to its sources: the same types)
    const differ = optionsDiffer(config.options, program.getCompilerOptions());
    if (differ.length > 0) {
      process.stdout.write(`lint: ${p.config} differs from tsconfig.check.json in ${differ.join(", ")}: not emitted\n`);
      clean = false;
      continue;
    }
    const own = new Set(config.fileNames.map((f) => path.resolve(root, f)));
    const files = program.getSourceFiles().filter((sf) => own.has(path.resolve(sf.fileName)));
    const here = path.join(root, "dist", path.relative(root, config.options.rootDir ?? root));
    const there = path.resolve(config.options.outDir);
    const write = (f, text, bom) => ts.sys.writeFile(path.join(there, path.relative(here, f)), text, bom);
    for (const sf of files) {
      const r = program.emit(sf, write);
      clean &&= !r.emitSkipped && r.diagnostics.length === 0;
      // NB: emitting checked the file, so these are at hand: tsc -p on the project would have failed on them
      clean &&= program.getSyntacticDiagnostics(sf).length + program.getSemanticDiagnostics(sf).length === 0;
    }
    clean &&= files.length === own.size;
    count += files.length;
  }
  process.stdout.write(`lint: emitted the test build (${count} files) in ${secs(t1)} s\n`);
  // NB: recorded as built only where tsc would have passed; otherwise test/global-setup.ts runs tsc itself,
  // which fails the run there as it always did
  if (clean) recordBuilt(root, inputs);
  process.send?.({ built: true });
}
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
