/**
 * The address a worker advertises, which its peers dial (its listener, its tcp channel's lanes).
 * First found:
 * 1. TPRPC_ADDR, as given (a host with several networks);
 * 2. TPRPC_IFACE (`tprpc launch --iface`): that interface's first IPv4 address (else its first one);
 * 3. a store on loopback: the store's host (a one-host group stays on loopback);
 * 4. the local address of the interface that routes to the store's host: the source address the
 *    kernel picks for a UDP socket "connected" to it (connect() on UDP only looks up the route; no
 *    packet is sent).
 * A loopback address is never advertised to a group whose store is on another host, and a host
 * with no route to the store fails here, at init, with an AddressError saying what to set, instead of
 * its peers timing out later.
 */
import dgram from "node:dgram";
import net from "node:net";
import os from "node:os";
import { AddressError } from "../errors/index.js";

const LOOPBACK = /^(127\.|localhost$|::1$|\[::1\]$|::ffff:127\.)/;

export function isLoopback(host: string): boolean {
  return LOOPBACK.test(host);
}

function ifaceAddress(name: string): string {
  const all = os.networkInterfaces();
  const addrs = all[name];
  if (!addrs || addrs.length === 0)
    throw new AddressError(
      `TPRPC_IFACE names the interface "${name}", which this host does not have (it has: ${Object.keys(all).join(", ")})`,
    );
  const v4 = addrs.find((a) => a.family === "IPv4");
  return (v4 ?? addrs.find((a) => !a.address.startsWith("fe80")) ?? addrs[0]!).address;
}

/** The local address of the route to host:port, or an AddressError when there is none. */
export function routeSource(host: string, port: number, timeoutMs = 5_000): Promise<string> {
  const family = net.isIPv6(host) ? "udp6" : "udp4";
  return new Promise((resolve, reject) => {
    const sock = dgram.createSocket(family);
    const timer = setTimeout(
      () => done(new AddressError(`looking up the route to ${host} took over ${timeoutMs} ms`)),
      timeoutMs,
    );
    const done = (e: Error | null, addr?: string) => {
      clearTimeout(timer);
      sock.close();
      if (e) reject(e);
      else resolve(addr!);
    };
    sock.once("error", (e) =>
      done(
        new AddressError(
          `no address of this host reaches the group's master ${host}:${port} (${e.message}); ` +
            "check the master address, or set TPRPC_ADDR / TPRPC_IFACE (tprpc launch --iface)",
        ),
      ),
    );
    sock.connect(port, host, () => {
      try {
        const addr = sock.address().address;
        // NB: on a host without a route to it, Linux may still "connect" the socket, to no source address
        if (addr === "0.0.0.0" || addr === "::")
          return done(
            new AddressError(
              `no address of this host reaches the group's master ${host}:${port} (no route to it); ` +
                "check the master address, or set TPRPC_ADDR / TPRPC_IFACE (tprpc launch --iface)",
            ),
          );
        done(null, addr);
      } catch (e) {
        done(e as Error);
      }
    });
  });
}

/** The address to advertise for a worker whose store is at storeHost:storePort (see the top). */
export async function advertisedAddress(
  storeHost: string,
  storePort: number,
  env: NodeJS.ProcessEnv = process.env,
): Promise<string> {
  const remote = !isLoopback(storeHost);
  let addr: string;
  let source: string;
  if (env.TPRPC_ADDR) {
    addr = env.TPRPC_ADDR;
    source = `TPRPC_ADDR=${addr}`;
  } else if (env.TPRPC_IFACE) {
    addr = ifaceAddress(env.TPRPC_IFACE);
    source = `TPRPC_IFACE=${env.TPRPC_IFACE} (${addr})`;
  } else if (!remote) {
    return storeHost.replace(/^\[|\]$/g, "");
  } else {
    addr = await routeSource(storeHost, storePort);
    source = `the route to ${storeHost} (${addr})`;
  }
  if (remote && isLoopback(addr))
    throw new AddressError(
      `this worker would advertise the loopback address ${source} to a group whose master is on another host ` +
        `(${storeHost}); set TPRPC_ADDR to an address the other hosts reach, or TPRPC_IFACE to its interface`,
    );
  return addr;
}
