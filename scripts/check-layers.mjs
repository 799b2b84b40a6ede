#!/usr/bin/env node
/**
 * Layer check: fails when an import in sdk/ or kernel-ext/ goes against the layer table (docs/architecture.md).
 *
 * 1. Every .ts/.mts/.cts file under sdk/ and kernel-ext/ is parsed with the TypeScript compiler
 *    (so comments and strings never count) for module specifiers: `import ... from`, `import type`,
 *    `export ... from`, `import("...")` (calls and type positions), `require("...")`, `import x = require()`.
 * 2. A relative specifier is resolved to a path; its layer is the first folder under sdk/
 *    (sdk/index.ts is the layer "index"). Bare specifiers are npm packages or node builtins,
 *    except "tprpc" (and "tprpc/...") which means sdk/index.ts.
 * 3. Each (importer layer -> imported layer) arrow is looked up in ALLOWED below.
 * 4. Only one file may load the .node binding (node-gyp-build, a "*.node" path, process.dlopen),
 *    and it must live in sdk/native/.
 *
 * Usage: node scripts/check-layers.mjs [repoRoot] [--json]   (exit 0 clean, 1 violations, 2 crash)
 * API:   import { checkLayers } from "./check-layers.mjs"; checkLayers(root) -> { files, violations }
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import ts from "typescript";

// ---------------------------------------------------------------------------------------------
// The layer table. Key: a layer (folder under sdk/); value: the layers it may import besides
// itself. Transitively closed from these arrows ("an arrow means may import"); docs/architecture.md
// ("Layers") reproduces the resulting table:
//
//   util, errors  <-  tensor  <-  autograd  <-  nn, optim
//   util, errors  <-  native(binding only)  <-  transport  <-  channel  <-  pipe
//   wire (tensor descriptors, payload codec)  <-  rpc (agent, rref, rendezvous)
//   rpc  <-  dist_autograd  <-  dist_optim, remote_module
//
// Decisions the arrows leave open (docs/architecture.md describes the result):
// - errors is the leaf; util may import errors (util's checks throw typed errors), not the reverse.
// - nn and optim are siblings: neither imports the other.
// - wire may import tensor (descriptors) but not autograd, native or the byte-moving layers.
// - rpc may import wire, pipe and everything below it, tensor and autograd (not nn or optim).
// - Nothing imports sdk/index.ts (or "tprpc") except kernel-ext; index.ts may import anything.
// - A folder under sdk/ that is not in this table is an error: add it here with its arrows.
// ---------------------------------------------------------------------------------------------
const BASE = ["util", "errors"];
const TENSOR = [...BASE, "tensor"];
const AUTOGRAD = [...TENSOR, "autograd"];
const BYTES = [...BASE, "native", "transport", "channel", "pipe"];
const RPC = [...new Set([...BYTES, ...AUTOGRAD, "wire", "rpc"])];

export const ALLOWED = {
  errors: [],
  util: ["errors"],
  tensor: BASE,
  autograd: TENSOR,
  nn: AUTOGRAD,
  optim: AUTOGRAD,
  native: BASE,
  transport: [...BASE, "native"],
  channel: [...BASE, "native", "transport"],
  pipe: [...BASE, "native", "transport", "channel"],
  wire: TENSOR,
  rpc: RPC,
  dist_autograd: RPC,
  dist_optim: [...RPC, "dist_autograd", "nn", "optim"],
  remote_module: [...RPC, "dist_autograd", "nn", "optim"],
  // Point-to-point, collectives and DistributedDataParallel (over rpc; DDP wraps nn modules).
  distributed: [...RPC, "dist_autograd", "nn"],
  // Notebook helpers: display renders tensors, progress and charts; cluster starts local workers.
  display: TENSOR,
  cluster: [...RPC, "display"],
  index: "*",
};

/** The one folder allowed to hold the file that loads the .node binding. */
export const BINDING_LAYER = "native";

const SOURCE_RE = /\.(ts|mts|cts|tsx)$/;
const SKIP_DIRS = new Set(["node_modules", "dist", "build", ".git"]);

function listSources(dir) {
  if (!fs.existsSync(dir)) return [];
  const out = [];
  for (const ent of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, ent.name);
    if (ent.isDirectory()) {
      if (!SKIP_DIRS.has(ent.name)) out.push(...listSources(p));
    } else if (ent.isFile() && SOURCE_RE.test(ent.name)) out.push(p);
  }
  return out.sort();
}

function stringValue(node) {
  return node && (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) ? node.text : undefined;
}

/** Module specifiers of one file: [{ spec, line }], plus whether it loads a .node binding. */
export function scanFile(file, text = fs.readFileSync(file, "utf8")) {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const specs = [];
  const bindingLines = [];
  const lineOf = (node) => sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1;
  const add = (node, spec) => spec !== undefined && specs.push({ spec, line: lineOf(node) });
  const visit = (node) => {
    if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) {
      add(node, stringValue(node.moduleSpecifier));
    } else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
      add(node, stringValue(node.moduleReference.expression));
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      add(node, stringValue(node.argument.literal));
    } else if (ts.isCallExpression(node)) {
      const callee = node.expression;
      const isImport = callee.kind === ts.SyntaxKind.ImportKeyword;
      const isRequire = ts.isIdentifier(callee) && callee.text === "require";
      if ((isImport || isRequire) && node.arguments.length > 0) add(node, stringValue(node.arguments[0]));
      if (ts.isPropertyAccessExpression(callee) && callee.name.text === "dlopen") bindingLines.push(lineOf(node));
    }
    const s = stringValue(node);
    if (s !== undefined && (s === "node-gyp-build" || /(^|[/\\])[\w.-]+\.node$/.test(s)))
      bindingLines.push(lineOf(node));
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return { specs, bindingLines: [...new Set(bindingLines)] };
}

/** The layer of an absolute path: a folder name under sdk/, "index", or null when outside sdk/. */
function layerOf(sdkDir, abs) {
  const rel = path.relative(sdkDir, abs);
  if (rel.startsWith("..") || path.isAbsolute(rel)) return null;
  if (rel === "") return "index";
  const first = rel.split(path.sep)[0];
  return first.replace(/\.(d\.)?(ts|mts|cts|tsx|js|mjs|cjs)$/, "");
}

function isIndex(sdkDir, abs) {
  return layerOf(sdkDir, abs) === "index";
}

/** Checks the tree at `root`; returns { files, violations: [{ file, line, message }] } (paths relative to root). */
export function checkLayers(root) {
  root = path.resolve(root);
  const sdkDir = path.join(root, "sdk");
  const extDir = path.join(root, "kernel-ext");
  const violations = [];
  const loaders = [];
  const files = [...listSources(sdkDir), ...listSources(extDir)];
  const rel = (p) => path.relative(root, p).split(path.sep).join("/");

  for (const file of files) {
    const inSdk = layerOf(sdkDir, file) !== null;
    const from = inSdk ? layerOf(sdkDir, file) : "kernel-ext";
    const { specs, bindingLines } = scanFile(file);
    if (bindingLines.length) loaders.push({ file, line: bindingLines[0], from });

    if (inSdk && !(from in ALLOWED)) {
      violations.push({
        file: rel(file),
        line: 1,
        message: `sdk/${from} is not a known layer: add it to ALLOWED in scripts/check-layers.mjs (and docs/architecture.md)`,
      });
      continue;
    }
    for (const { spec, line } of specs) {
      const bad = (what) => violations.push({ file: rel(file), line, message: `${what} (import "${spec}")` });
      const relative = spec.startsWith("./") || spec.startsWith("../") || spec === "." || spec === "..";
      if (!relative) {
        if (path.isAbsolute(spec)) bad(`${from} -> absolute path: use a relative import`);
        else if (spec === "tprpc" || spec.startsWith("tprpc/")) {
          if (inSdk && from !== "index")
            bad(`${from} -> index ("tprpc"): sdk files import the layer they need, never the package entry`);
          else if (!inSdk && spec !== "tprpc")
            bad(`kernel-ext -> ${spec}: kernel-ext imports only "tprpc" (sdk/index.ts)`);
        }
        continue; // npm package or node builtin
      }
      if (spec.endsWith(".node")) continue; // the addon itself: judged by the binding rule below
      const target = path.resolve(path.dirname(file), spec);
      if (!inSdk) {
        const inExt = !path.relative(extDir, target).startsWith("..");
        const distIndex = path.join(root, "dist", "sdk", "index.js");
        if (!inExt && !isIndex(sdkDir, target) && target !== distIndex) {
          bad(`kernel-ext -> ${rel(target)}: kernel-ext imports only "tprpc" (sdk/index.ts), tslab and npm packages`);
        }
        continue;
      }
      const to = layerOf(sdkDir, target);
      if (to === null) {
        bad(`${from} -> ${rel(target)}: sdk/ must not import files outside sdk/`);
        continue;
      }
      if (to === from) continue;
      const allowed = ALLOWED[from];
      if (allowed === "*") continue;
      if (to === "index") bad(`${from} -> index: nothing in sdk/ imports sdk/index.ts (it re-exports the layers)`);
      else if (!allowed.includes(to)) {
        const ok = allowed.length ? allowed.join(", ") : "nothing else";
        bad(`${from} -> ${to} goes against the layer table in docs/architecture.md (${from} may import: ${ok})`);
      }
    }
  }

  // Only one file loads the .node binding, and it lives in sdk/native/.
  for (const l of loaders) {
    if (l.from !== BINDING_LAYER) {
      violations.push({
        file: rel(l.file),
        line: l.line,
        message: `loads the .node binding outside sdk/${BINDING_LAYER}/: import the typed wrapper in sdk/${BINDING_LAYER}/ instead`,
      });
    }
  }
  if (loaders.length > 1) {
    const list = loaders.map((l) => `${rel(l.file)}:${l.line}`).join(", ");
    for (const l of loaders) {
      violations.push({
        file: rel(l.file),
        line: l.line,
        message: `only one file may load the .node binding (node-gyp-build / *.node); found ${loaders.length}: ${list}`,
      });
    }
  }
  return { files: files.map(rel), violations };
}

function main(argv) {
  const json = argv.includes("--json");
  const args = argv.filter((a) => a !== "--json");
  const root = args[0] ?? path.join(path.dirname(fileURLToPath(import.meta.url)), "..");
  const { files, violations } = checkLayers(root);
  if (json) {
    process.stdout.write(`${JSON.stringify({ files, violations }, null, 2)}\n`);
  } else if (violations.length === 0) {
    process.stdout.write(
      `layer check: ${files.length} files, no import goes against the layer table in docs/architecture.md\n`,
    );
  } else {
    for (const v of violations) process.stderr.write(`${v.file}:${v.line}: ${v.message}\n`);
    process.stderr.write(
      `layer check: ${violations.length} violation(s) in ${files.length} files (table: scripts/check-layers.mjs)\n`,
    );
  }
  return violations.length ? 1 : 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  try {
    process.exitCode = main(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`layer check crashed: ${e?.stack ?? e}\n`);
    process.exitCode = 2;
  }
}
