/**
 * sdk/autograd/node.ts keeps the backward closure each built-in op name ran last alive (so V8 keeps its
 * optimized code across full GCs): one per name, only when its tensors are small, never a user's
 * (autograd.recordOp). Checked with weak references in a child process run with --expose-gc.
 */
import { describe, expect, it } from "vitest";
import { runFixture } from "../native/helpers.js";

describe("retained backward closures", () => {
  it("keep one small closure per op name, release it at that name's next run, never keep large or user ones", () => {
    const { result: r } = runFixture<{
      smallKept: boolean;
      smallReleasedByNext: boolean;
      nextKept: boolean;
      bigReleased: boolean;
      nextReleasedByBig: boolean;
      customReleased: boolean;
    }>("retain-code.mjs", [], { flags: ["--expose-gc"], timeoutMs: 60_000 });
    expect(r).toEqual({
      smallKept: true,
      smallReleasedByNext: true,
      nextKept: true,
      bigReleased: true,
      nextReleasedByBig: true,
      customReleased: true,
    });
  });
});
