/**
 * The pipe's state machine: the transition table is enforced (an illegal move
 * throws and leaves the state as it was), a pipe's life through the public
 * API follows the documented steps, and a seeded random mix of peer frames
 * (good, out of turn, malformed, another version) and public calls never
 * drives a pipe into an illegal transition.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import "../../sdk/channel/backends.js";
import { ChannelNotViableError, TprpcError } from "../../sdk/errors/index.js";
import { encodeBody } from "../../sdk/pipe/codec.js";
import { FrameKind, encodeFrameHead } from "../../sdk/pipe/frame.js";
import {
  CAPABILITIES_VERSION,
  IllegalPipeTransitionError,
  PIPE_TRANSITIONS,
  PIPE_VERSION,
  Pipe,
  type PipeState,
  localCapabilities,
} from "../../sdk/pipe/index.js";
import { PipeStateMachine } from "../../sdk/pipe/state.js";
import { below, prng } from "../reliability/common.js";
import { MemoryConnection, memoryPair, until } from "./memory.js";

const STATES: PipeState[] = ["handshaking", "refusing", "settingUp", "open", "closed"];
/** A legal way from "handshaking" to each state. */
const PATH: Record<PipeState, PipeState[]> = {
  handshaking: [],
  refusing: ["refusing"],
  settingUp: ["settingUp"],
  open: ["settingUp", "open"],
  closed: ["closed"],
};

const caps = (name: string, channels: string[] = []) => localCapabilities(name, channels, { cpu: 1, cuda: 0 });
const opts = (name: string, channels: string[] = [], local = caps(name, channels)) => ({
  local,
  secret: "state-test-secret",
  host: "127.0.0.1",
  timeoutMs: 5_000,
});

/** Every transition any pipe makes while a test runs, as "from->to", and every one refused. */
let made: string[] = [];
let refused: unknown[] = [];
const byMachine = new Map<PipeStateMachine, PipeState[]>();
beforeEach(() => {
  made = [];
  refused = [];
  byMachine.clear();
  const original = PipeStateMachine.prototype.transition;
  vi.spyOn(PipeStateMachine.prototype, "transition").mockImplementation(function (this: PipeStateMachine, to) {
    const from = this.state;
    try {
      original.call(this, to);
    } catch (e) {
      refused.push(e);
      throw e;
    }
    made.push(`${from}->${to}`);
    byMachine.set(this, [...(byMachine.get(this) ?? [from]), to]);
  });
});
afterEach(() => vi.restoreAllMocks());

/** The states `pipe` went through, from "handshaking". */
function lifeOf(pipe: Pipe): PipeState[] {
  return byMachine.get((pipe as unknown as { sm: PipeStateMachine }).sm) ?? ["handshaking"];
}

describe("the transition table", () => {
  it("allows exactly the documented moves", () => {
    expect(PIPE_TRANSITIONS).toEqual({
      handshaking: ["settingUp", "refusing", "closed"],
      refusing: ["closed"],
      settingUp: ["open", "closed"],
      open: ["closed"],
      closed: [],
    });
  });

  it.each(STATES)("from %s, an illegal move throws IllegalPipeTransitionError and changes nothing", (from) => {
    for (const to of STATES) {
      const m = new PipeStateMachine();
      for (const s of PATH[from]) m.transition(s);
      expect(m.state).toBe(from);
      if (PIPE_TRANSITIONS[from].includes(to)) {
        m.transition(to);
        expect(m.state).toBe(to);
      } else {
        expect(() => m.transition(to)).toThrow(IllegalPipeTransitionError);
        expect(() => m.transition(to)).toThrow(`cannot move from "${from}" to "${to}"`);
        expect(m.state).toBe(from);
      }
    }
    // NB: an internal error, not a TprpcError: a hostile peer must never be able to cause one
    expect(new IllegalPipeTransitionError("open", "handshaking")).not.toBeInstanceOf(TprpcError);
  });
});

describe("a pipe's life through the public API", () => {
  it("opens handshaking → settingUp → open, closes once, and refuses sends after", async () => {
    const [accConn, conConn] = memoryPair();
    const acc = Pipe.accept(accConn, opts("acceptor", ["tcp"]));
    const con = Pipe.open(conConn, "acceptor", opts("connector", ["tcp"]));
    expect([acc.state, con.state]).toEqual(["handshaking", "handshaking"]);
    const queued = con.send({ control: [Buffer.from("early")], buffers: [] });
    await Promise.all([acc.ready, con.ready]);
    expect([acc.state, con.state]).toEqual(["open", "open"]);
    await queued;
    con.close();
    con.close();
    expect(con.state).toBe("closed");
    expect(con.closed).toBe(true);
    await expect(con.send({ control: [Buffer.from("late")], buffers: [] })).rejects.toThrow(/closed/);
    await until(() => acc.closed);
    expect(lifeOf(con)).toEqual(["handshaking", "settingUp", "open", "closed"]);
    expect(lifeOf(acc)).toEqual(["handshaking", "settingUp", "open", "closed"]);
    expect(refused).toEqual([]);
  });

  it("an acceptor that cannot negotiate goes handshaking → refusing → closed", async () => {
    const [accConn, conConn] = memoryPair();
    const acc = Pipe.accept(accConn, opts("acceptor"));
    const other = { ...caps("connector"), version: CAPABILITIES_VERSION + 1 };
    const con = Pipe.open(conConn, "acceptor", opts("connector", [], other));
    await expect(con.ready).rejects.toThrow(ChannelNotViableError);
    await until(() => acc.closed);
    expect(lifeOf(acc)).toEqual(["handshaking", "refusing", "closed"]);
    expect(lifeOf(con)).toEqual(["handshaking", "closed"]);
  });

  it("closing while the channels are set up goes settingUp → closed, and the late channels are closed", async () => {
    const [accConn, conConn] = memoryPair();
    const acc = Pipe.accept(accConn, opts("acceptor", ["tcp"]));
    const con = Pipe.open(conConn, "acceptor", opts("connector", ["tcp"]));
    await until(() => acc.state === "settingUp");
    acc.close();
    await until(() => con.closed);
    expect(lifeOf(acc)).toEqual(["handshaking", "settingUp", "closed"]);
    expect(refused).toEqual([]);
  });
});

describe("no sequence of peer frames and public calls makes an illegal transition", () => {
  const frame = (kind: FrameKind, body: Uint8Array, version = PIPE_VERSION) => {
    const head = encodeFrameHead(kind, body.byteLength, []);
    head[3] = version;
    return Buffer.concat([head, body]);
  };
  const peerCaps = caps("peer");
  const FRAMES: (() => Uint8Array)[] = [
    () => frame(FrameKind.HELLO, encodeBody(peerCaps)),
    () => frame(FrameKind.HELLO, encodeBody({ ...peerCaps, version: CAPABILITIES_VERSION + 1 })),
    () =>
      frame(FrameKind.ACCEPT, encodeBody({ caps: peerCaps, negotiation: { choice: {}, missing: {} }, channels: [] })),
    () => frame(FrameKind.SETUP, encodeBody({ c: 0, m: { x: 1 } })),
    () => frame(FrameKind.REFUSE, encodeBody({ reason: "no" })),
    () => frame(FrameKind.MESSAGE, Buffer.from("ctl")),
    () => frame(FrameKind.HELLO, encodeBody(peerCaps), 3),
    () => frame(FrameKind.HELLO, Buffer.from(JSON.stringify(peerCaps))),
    () => Buffer.from("GET / HTTP/1.1\r\n\r\n"),
  ];

  it("600 seeded runs reach every legal transition and no illegal one", async () => {
    const rand = prng(0x5747e);
    const closes: (Error | null)[] = [];
    for (let run = 0; run < 600; run++) {
      const conn = new MemoryConnection();
      const pipe = rand() & 1 ? Pipe.accept(conn, opts("acceptor")) : Pipe.open(conn, "peer", opts("connector"));
      pipe.ready.catch(() => undefined);
      pipe.onClose((e) => closes.push(e));
      pipe.onMessage(() => undefined);
      const steps = 1 + below(rand, 8);
      for (let i = 0; i < steps; i++) {
        const op = below(rand, FRAMES.length + 5);
        if (op < FRAMES.length) expect(() => conn.push(FRAMES[op]!())).not.toThrow();
        else if (op === FRAMES.length) pipe.send({ control: [Buffer.from("x")], buffers: [] }).catch(() => undefined);
        else if (op === FRAMES.length + 1) pipe.close();
        else if (op === FRAMES.length + 2) conn.close(new Error("peer hung up"));
        else if (op === FRAMES.length + 3) pipe.info();
        else await new Promise((r) => setImmediate(r));
      }
      pipe.close();
      await new Promise((r) => setImmediate(r));
      expect(pipe.state).toBe("closed");
    }
    expect(refused).toEqual([]);
    for (const e of closes) if (e !== null) expect(e).toBeInstanceOf(TprpcError);
    const legal = STATES.flatMap((from) => PIPE_TRANSITIONS[from].map((to) => `${from}->${to}`));
    expect(new Set(made)).toEqual(new Set(legal));
  });
});
