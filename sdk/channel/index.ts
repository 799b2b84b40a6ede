/**
 * The channel registry: every channel backend registers its context here
 * once per process (sdk/channel/<name>/index.ts calls `registerChannel` when
 * imported; the pipe layer imports the backends). The pipe layer asks
 * `registeredChannels()` for what to advertise; forced choices
 * (options.channels, TPRPC_CHANNELS) filter it by name.
 *
 *   registerChannel(tcpChannelContext);
 *   getChannel("tcp")?.isViable();   // true
 */
import { ValueError } from "../errors/index.js";
import type { ChannelContext } from "./interface.js";

export * from "./interface.js";

const contexts = new Map<string, ChannelContext>();
const NAME = /^[a-z][a-z0-9_]{0,31}$/;

/** Makes `ctx` available to every pipe opened from now on (a context with the same name is replaced). */
export function registerChannel(ctx: ChannelContext): void {
  if (!NAME.test(ctx.name))
    throw new ValueError(`registerChannel(): channel name "${ctx.name}" must match ${NAME} (e.g. "shm", "cuda_ipc")`);
  contexts.set(ctx.name, ctx);
}

/** Removes a context (tests); pipes already open keep their channels. */
export function unregisterChannel(name: string): void {
  contexts.delete(name);
}

/** The context registered under `name`, or undefined. */
export function getChannel(name: string): ChannelContext | undefined {
  return contexts.get(name);
}

/** Every registered context, in registration order (viable or not). */
export function registeredChannels(): ChannelContext[] {
  return [...contexts.values()];
}

/** The registered contexts whose isViable() is true (a throwing isViable counts as not viable). */
export function viableChannels(): ChannelContext[] {
  return registeredChannels().filter((c) => {
    try {
      return c.isViable();
    } catch {
      return false;
    }
  });
}
