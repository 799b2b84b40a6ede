/**
 * The address a worker advertises (sdk/rpc/address.ts): loopback for a loopback group, TPRPC_ADDR and
 * TPRPC_IFACE honoured, the source address of the route to the master otherwise, and an AddressError
 * (never a loopback address) when the master is on another host and nothing reaches it. The no-route case
 * on a host without routes runs in test/multihost (it needs a network namespace).
 */
import os from "node:os";
import { describe, expect, it } from "vitest";
import { AddressError } from "../../sdk/errors/index.js";
import { advertisedAddress, isLoopback, routeSource } from "../../sdk/rpc/address.js";

const external = Object.values(os.networkInterfaces())
  .flat()
  .find((a) => a && a.family === "IPv4" && !a.internal)?.address;

describe("advertisedAddress", () => {
  it("keeps a loopback group on loopback", async () => {
    expect(await advertisedAddress("127.0.0.1", 29500, {})).toBe("127.0.0.1");
    expect(await advertisedAddress("::1", 29500, {})).toBe("::1");
    expect(isLoopback("localhost")).toBe(true);
    expect(isLoopback("10.0.0.1")).toBe(false);
  });

  it("takes TPRPC_ADDR as given, and TPRPC_IFACE's address", async () => {
    expect(await advertisedAddress("10.1.2.3", 29500, { TPRPC_ADDR: "10.9.8.7" })).toBe("10.9.8.7");
    expect(await advertisedAddress("127.0.0.1", 29500, { TPRPC_IFACE: "lo" })).toBe("127.0.0.1");
  });

  it("refuses a loopback address for a master on another host, and an interface this host lacks", async () => {
    await expect(advertisedAddress("10.1.2.3", 29500, { TPRPC_ADDR: "127.0.0.1" })).rejects.toThrow(AddressError);
    await expect(advertisedAddress("10.1.2.3", 29500, { TPRPC_IFACE: "lo" })).rejects.toThrow(
      /loopback address TPRPC_IFACE=lo \(127\.0\.0\.1\) to a group whose master is on another host/,
    );
    await expect(advertisedAddress("10.1.2.3", 29500, { TPRPC_IFACE: "nosuch0" })).rejects.toThrow(
      /TPRPC_IFACE names the interface "nosuch0", which this host does not have \(it has: .*lo/,
    );
  });

  it.skipIf(external === undefined)("uses the source address of the route to the master", async () => {
    // NB: the route to one of our own addresses goes through lo, but its source is that address
    expect(await routeSource(external!, 29500)).toBe(external);
    expect(await advertisedAddress(external!, 29500, {})).toBe(external);
  });
});
