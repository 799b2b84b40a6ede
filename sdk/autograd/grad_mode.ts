/**
 * Grad mode: whether ops record a graph. `noGrad(fn)` runs fn without
 * recording (as `with torch.no_grad()`); when fn returns a Promise the mode is
 * restored once it settles — NB: other async work that runs meanwhile on the
 * JS thread also sees grad disabled, so keep async no-grad regions short.
 */

let enabled = true;

export function isGradEnabled(): boolean {
  return enabled;
}

export function setGradEnabled(v: boolean): void {
  enabled = v;
}

function withMode<T>(mode: boolean, fn: () => T): T {
  const prev = enabled;
  enabled = mode;
  let result: T;
  try {
    result = fn();
  } catch (e) {
    enabled = prev;
    throw e;
  }
  if (result instanceof Promise) {
    return result.finally(() => {
      enabled = prev;
    }) as T;
  }
  enabled = prev;
  return result;
}

/** Runs fn with gradient recording disabled. */
export function noGrad<T>(fn: () => T): T {
  return withMode(false, fn);
}

/** Runs fn with gradient recording enabled (inside a noGrad region). */
export function enableGrad<T>(fn: () => T): T {
  return withMode(true, fn);
}
