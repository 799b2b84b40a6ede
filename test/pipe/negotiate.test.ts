import { describe, expect, it } from "vitest";
import type { Capabilities, ChannelAdvert } from "../../sdk/channel/interface.js";
import { ChannelNotViableError, ValueError } from "../../sdk/errors/index.js";
import {
  CAPABILITIES_VERSION,
  checkChoice,
  flipNegotiation,
  negotiate,
  parseChannelList,
} from "../../sdk/pipe/negotiate.js";

const host = (bootId: string, ipc = "1") => ({
  hostname: "h",
  bootId,
  namespaces: { ipc, pid: "2", user: "3" },
  pid: 100,
  uid: 1000,
});

const tcp: ChannelAdvert = { name: "tcp", priorities: { "cpu-cpu": 100 }, domain: "any" };
const shm = (domain: string): ChannelAdvert => ({ name: "shm", priorities: { "cpu-cpu": 400 }, domain });
const ucx = (domain: string): ChannelAdvert => ({
  name: "ucx",
  priorities: { "cpu-cpu": 200, "cuda-cuda": 550, "cpu-cuda": 550, "cuda-cpu": 550 },
  domain,
});
const nccl: ChannelAdvert = { name: "nccl", priorities: { "cuda-cuda": 500 }, domain: "nccl" };

function caps(name: string, channels: ChannelAdvert[], cuda = 0, bootId = "b1"): Capabilities {
  return { version: CAPABILITIES_VERSION, name, host: host(bootId), devices: { cpu: 1, cuda }, channels };
}

describe("negotiate", () => {
  it("picks shm over tcp on one host and tcp across hosts", () => {
    const a = caps("a", [tcp, shm("b1/1")]);
    expect(negotiate(a, caps("b", [shm("b1/1"), tcp])).choice).toEqual({ "cpu-cpu": "shm" });
    const far = negotiate(a, caps("b", [shm("b2/1"), tcp], 0, "b2"));
    expect(far.choice).toEqual({ "cpu-cpu": "tcp" });
    expect(far.missing).toEqual({});
  });

  it("serves only the pairs both sides have devices for, and reports pairs without a channel", () => {
    const a = caps("a", [tcp, nccl], 2);
    const b = caps("b", [tcp], 1);
    const n = negotiate(a, b);
    expect(n.choice).toEqual({ "cpu-cpu": "tcp" });
    expect(Object.keys(n.missing).sort()).toEqual(["cpu-cuda", "cuda-cpu", "cuda-cuda"]);
    expect(n.missing["cuda-cuda"]).toMatch(/nccl: not offered by "b"/);
    // b has no GPU: only cpu-cpu and cuda-cpu are pairs at all, and tcp serves only the first
    expect(Object.keys(negotiate(a, caps("b", [tcp])).missing)).toEqual(["cuda-cpu"]);
  });

  it("ranks per pair: ucx for GPU pairs, shm for CPU, and both sides agree", () => {
    const a = caps("a", [tcp, shm("d"), ucx("u"), nccl], 1);
    const b = caps("b", [nccl, ucx("u"), shm("d"), tcp], 1);
    const n = negotiate(a, b);
    expect(n.choice).toEqual({ "cpu-cpu": "shm", "cpu-cuda": "ucx", "cuda-cpu": "ucx", "cuda-cuda": "ucx" });
    expect(flipNegotiation(negotiate(b, a))).toEqual(n);
    // without ucx, nccl serves cuda-cuda and nothing serves the mixed pairs
    const m = negotiate(caps("a", [tcp, nccl], 1), caps("b", [tcp, nccl], 1));
    expect(m.choice).toEqual({ "cpu-cpu": "tcp", "cuda-cuda": "nccl" });
  });

  it("uses the lower of the two priorities, so a side that ranks a channel low is respected", () => {
    const a = caps("a", [tcp, { ...shm("d"), priorities: { "cpu-cpu": 50 } }]);
    const b = caps("b", [tcp, shm("d")]);
    expect(negotiate(a, b).choice["cpu-cpu"]).toBe("tcp");
    expect(negotiate(b, a).choice["cpu-cpu"]).toBe("tcp");
  });

  it("a channel forced away on one side (not advertised) is not chosen", () => {
    expect(negotiate(caps("a", [tcp]), caps("b", [shm("d"), tcp])).choice).toEqual({ "cpu-cpu": "tcp" });
    const none = negotiate(caps("a", [shm("d")]), caps("b", [tcp]));
    expect(none.choice).toEqual({});
    expect(none.missing["cpu-cpu"]).toMatch(/shm: not offered/);
  });

  it("refuses another capability version and a choice we did not offer", () => {
    const a = caps("a", [tcp]);
    expect(() => negotiate(a, { ...caps("b", [tcp]), version: 99 })).toThrow(ChannelNotViableError);
    expect(() => checkChoice(a, { choice: { "cpu-cpu": "shm" }, missing: {} })).toThrow(/did not offer/);
    expect(() => checkChoice(a, { choice: { "cpu-cpu": "tcp" }, missing: {} })).not.toThrow();
  });
});

describe("parseChannelList", () => {
  it("reads comma lists and arrays, rejects junk", () => {
    expect(parseChannelList(undefined)).toBeNull();
    expect(parseChannelList("")).toBeNull();
    expect(parseChannelList(" shm, tcp ,shm")).toEqual(["shm", "tcp"]);
    expect(parseChannelList(["cma"])).toEqual(["cma"]);
    expect(() => parseChannelList("shm;tcp")).toThrow(ValueError);
  });
});
