/**
 * The store meetings of a graceful shutdown, among the CURRENT members of a
 * static group: a member that dies (its store claims are ephemeral, so the
 * others see it leave) is not waited for.
 *
 * meet(phase): this worker sets `shutdown/<phase>/<name>`, then waits until
 * every current member has set its key (a store watch reports arrivals, the
 * membership reports departures), bounded by the deadline. Its failure is an
 * RpcTimeoutError naming who did not arrive, or the store's own error.
 *
 * The join (TensorPipe's join loop): in round r every worker waits until it
 * has no call of its own in flight and serves none, adds how many it then has
 * to `shutdown/join/<r>/calls`, and meets the others; if the sum is 0 nobody
 * is busy (a call in flight is counted by its caller until its reply arrives),
 * else everyone goes round again. So a nested call between two other workers
 * that is still running when the master shuts down completes first.
 */
import { RpcError, RpcTimeoutError } from "../errors/index.js";
import type { Membership, StoreClient } from "./rendezvous/index.js";
import { LongTimer } from "./timeouts.js";

const PREFIX = "shutdown/";

export class ShutdownSync {
  constructor(
    private readonly store: StoreClient,
    private readonly membership: Membership,
    private readonly self: string,
    /** ms since the epoch after which every wait fails. */
    private readonly deadline: number,
  ) {}

  /** Waits until every current member has reached `phase`. */
  async meet(phase: string): Promise<void> {
    const base = `${PREFIX}${phase}/`;
    const arrived = new Set<string>();
    let wake: () => void = () => undefined;
    const unwatch = await this.store.watch(base, (e) => {
      if (e.kind === "set") arrived.add(e.key.slice(base.length));
      wake();
    });
    const unleave = this.membership.onLeave(() => wake());
    let timer: LongTimer | null = null;
    const unclose = this.store.onClose(() => wake());
    try {
      await this.store.set(base + this.self, "1");
      for (const k of (await this.store.list(base)).keys()) arrived.add(k.slice(base.length));
      await new Promise<void>((resolve, reject) => {
        const missing = () => this.membership.workers.map((w) => w.name).filter((n) => !arrived.has(n));
        wake = () => {
          if (this.store.closed)
            reject(new RpcError(`graceful shutdown: lost the group's store (hosted by rank 0) at "${phase}"`));
          else if (missing().length === 0) resolve();
        };
        const ms = Math.max(1, this.deadline - Date.now());
        timer = new LongTimer(ms, () =>
          reject(
            new RpcTimeoutError(
              `graceful shutdown timed out at "${phase}": ${missing().join(", ")} did not arrive; ` +
                "they are still busy or unreachable (rpc.shutdown({ graceful: false }) does not wait)",
              ms,
            ),
          ),
        );
        wake();
      });
    } finally {
      (timer as LongTimer | null)?.cancel();
      unleave();
      unclose();
      await unwatch().catch(() => undefined);
    }
  }

  /**
   * Rounds of "wait until idle here, report the calls in flight, meet" until no member has
   * any. `idle` resolves once this worker has none (or the deadline passed); `active` counts them.
   */
  async join(idle: (deadline: number) => Promise<void>, active: () => number): Promise<void> {
    for (let round = 0; ; round++) {
      await idle(this.deadline);
      const mine = active();
      if (mine > 0 && Date.now() >= this.deadline)
        throw new RpcTimeoutError(
          `graceful shutdown timed out with ${mine} call(s) still in flight on "${this.self}"; ` +
            "give rpc.shutdown a larger timeoutMs, or { graceful: false } to drop them",
          0,
        );
      await this.store.add(`${PREFIX}join/${round}/calls`, mine);
      await this.meet(`join-${round}`);
      if ((await this.store.add(`${PREFIX}join/${round}/calls`, 0)) === 0) return;
    }
  }
}
