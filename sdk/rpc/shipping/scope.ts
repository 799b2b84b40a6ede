/**
 * Where code shipping looks up a shipped function's top-level dependencies
 * (tslab's `exports.NAME` references and bare free names): tslab's `exports`
 * object in a notebook — the tprpc kernel sets it — and `globalThis` in a
 * script (the default).
 */
let scope: object | null = null;

/** Sets the lookup scope; `null` restores the default (`globalThis`). */
export function setShippingScope(s: object | null): void {
  scope = s;
}

/** The scope describeTarget resolves names against. */
export function currentShippingScope(): object {
  return scope ?? globalThis;
}
