/**
 * initRpc's rendezvous options: initMethod URLs (IPv4, [IPv6], hostnames),
 * the launcher env variables and their precedence, the secret rule, and
 * errors that say what to set.
 */
import { describe, expect, it } from "vitest";
import { ValueError } from "../../sdk/errors/index.js";
import { parseInitOptions, parseTcpUrl } from "../../sdk/rpc/rendezvous/index.js";

const S = { secret: "s3cret" };

describe("parseInitOptions", () => {
  it("reads tcp:// URLs with IPv4, bracketed IPv6 and hostnames", () => {
    expect(parseTcpUrl("tcp://127.0.0.1:29500")).toEqual({ host: "127.0.0.1", port: 29500 });
    expect(parseTcpUrl("tcp://[::1]:29500")).toEqual({ host: "::1", port: 29500 });
    expect(parseTcpUrl("tcp://node-7.cluster.local:1/")).toEqual({ host: "node-7.cluster.local", port: 1 });
    const c = parseInitOptions("w1", { rank: 1, worldSize: 2, initMethod: "tcp://[fe80::1]:65535", ...S }, {});
    expect(c).toMatchObject({ host: "fe80::1", port: 65535, initMethod: "tcp://[fe80::1]:65535", rank: 1 });
    expect(c.rpcTimeoutMs).toBe(60_000);
  });

  it("takes MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and TPRPC_SECRET from the env (env:// or no initMethod)", () => {
    const env = { MASTER_ADDR: "10.0.0.5", MASTER_PORT: "29501", RANK: "2", WORLD_SIZE: "4", TPRPC_SECRET: "abc" };
    for (const opts of [{}, { initMethod: "env://" }]) {
      const c = parseInitOptions("trainer.2", opts, env);
      expect(c).toMatchObject({ host: "10.0.0.5", port: 29501, rank: 2, worldSize: 4, secret: "abc" });
      expect(c.secretGenerated).toBe(false);
    }
  });

  it("lets options win over the env", () => {
    const env = { MASTER_ADDR: "10.0.0.5", MASTER_PORT: "29501", RANK: "2", WORLD_SIZE: "4", TPRPC_SECRET: "env" };
    const c = parseInitOptions(
      "w",
      { rank: 1, worldSize: 8, initMethod: "tcp://127.0.0.1:1234", secret: "opt", rpcTimeoutMs: 0 },
      env,
    );
    expect(c).toMatchObject({ host: "127.0.0.1", port: 1234, rank: 1, worldSize: 8, secret: "opt", rpcTimeoutMs: 0 });
  });

  it("leaves worldSize undefined (dynamic) when neither options nor env give it", () => {
    expect(parseInitOptions("w", { rank: 5, initMethod: "tcp://h:1", ...S }, {}).worldSize).toBeUndefined();
  });

  it("generates a secret on rank 0 only, and tells rank > 0 what to set", () => {
    const c = parseInitOptions("master", { rank: 0, worldSize: 2, initMethod: "tcp://h:1" }, {});
    expect(c.secretGenerated).toBe(true);
    expect(c.secret).toMatch(/^[0-9a-f]{64}$/);
    expect(() => parseInitOptions("w1", { rank: 1, worldSize: 2, initMethod: "tcp://h:1" }, {})).toThrow(
      /TPRPC_SECRET or options.secret/,
    );
  });

  it("refuses bad values with errors that say what to set", () => {
    const ok = { rank: 0, worldSize: 2, initMethod: "tcp://h:1", ...S };
    const bad: [string, object, RegExp, Record<string, string>?][] = [
      ["", ok, /non-empty name/],
      ["has space", ok, /letters, digits/],
      ["w", { ...ok, rank: undefined }, /options.rank or set the env variable RANK/],
      ["w", { ...ok, rank: 2 }, /rank 2 is out of range for worldSize 2/],
      ["w", { ...ok, rank: -1 }, /rank must be >= 0/],
      ["w", { ...ok, rank: 1.5 }, /rank must be an integer/],
      ["w", { ...ok, worldSize: 0 }, /worldSize must be >= 1/],
      ["w", { ...ok, initMethod: "file:///tmp/x" }, /"tcp:\/\/host:port" or "env:\/\/"/],
      ["w", { ...ok, initMethod: "tcp://h:0" }, /1\.\.65535/],
      ["w", { ...ok, initMethod: "tcp://h:70000" }, /1\.\.65535/],
      ["w", { ...ok, initMethod: "tcp://h" }, /tcp:\/\/host:port/],
      ["w", { ...ok, initMethod: undefined }, /MASTER_ADDR and MASTER_PORT \(missing: MASTER_ADDR, MASTER_PORT\)/],
      ["w", { ...ok, initMethod: undefined }, /MASTER_PORT must be/, { MASTER_ADDR: "h", MASTER_PORT: "x" }],
      [
        "w",
        { rank: 0, initMethod: "tcp://h:1", ...S },
        /WORLD_SIZE must be|worldSize must be an integer/,
        { WORLD_SIZE: "four" },
      ],
      ["w", { ...ok, rpcTimeoutMs: -1 }, /rpcTimeoutMs must be/],
    ];
    for (const [name, opts, re, env] of bad) {
      let err: unknown;
      try {
        parseInitOptions(name, opts, env ?? {});
      } catch (e) {
        err = e;
      }
      expect(err, `${name} ${JSON.stringify(opts)}`).toBeInstanceOf(ValueError);
      expect((err as Error).message).toMatch(re);
    }
  });
});
