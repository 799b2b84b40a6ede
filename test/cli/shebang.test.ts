/**
 * The installed `tprpc` command starts node with rpc.RPC_NODE_FLAGS (issue 23, item 7: a worker started
 * by hand gets what startLocalWorkers' workers get), through its shebang line.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { RPC_NODE_FLAGS } from "../../sdk/rpc/launcher.js";

const bin = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../bin/tprpc.mjs");

describe("bin/tprpc.mjs shebang", () => {
  it("names node with RPC_NODE_FLAGS", () => {
    const first = fs.readFileSync(bin, "utf8").split("\n")[0]!;
    expect(first).toBe(`#!/usr/bin/env -S node ${RPC_NODE_FLAGS.join(" ")}`);
  });

  it.skipIf(process.platform !== "linux")("runs as an executable (env -S splits the flags)", () => {
    const r = spawnSync(bin, ["--version"], { encoding: "utf8", timeout: 30_000 });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });
});
