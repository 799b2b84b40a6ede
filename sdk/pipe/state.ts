/**
 * The pipe's lifecycle as one explicit state (as tensorpipe's pipe keeps one
 * state enum): the states, the table of legal transitions, and the machine
 * that moves between them. ./pipe.ts's file comment tells what happens in
 * each state; this file only says which moves are legal.
 *
 *   handshaking ──► settingUp ──► open ──► closed
 *        │  └──► refusing ──► closed        ▲
 *        └──────────────────────────────────┘  (every state but closed may close)
 */

/** Where a pipe is in its life (./pipe.ts, "States"). */
export type PipeState = "handshaking" | "refusing" | "settingUp" | "open" | "closed";

/** Per state, the states it may move to. */
export const PIPE_TRANSITIONS: { readonly [S in PipeState]: readonly PipeState[] } = {
  handshaking: ["settingUp", "refusing", "closed"],
  refusing: ["closed"],
  settingUp: ["open", "closed"],
  open: ["closed"],
  closed: [],
};

/**
 * A move the table does not allow: a bug in the pipe, never a peer's doing
 * (the pipe checks the state before acting on a frame and answers a frame
 * out of turn with ProtocolError). Deliberately not a TprpcError.
 */
export class IllegalPipeTransitionError extends Error {
  constructor(
    readonly from: PipeState,
    readonly to: PipeState,
  ) {
    super(`internal error: the pipe cannot move from "${from}" to "${to}" (legal: ${legal(from)})`);
    this.name = "IllegalPipeTransitionError";
  }
}

function legal(from: PipeState): string {
  const to = PIPE_TRANSITIONS[from];
  return to.length > 0 ? to.join(", ") : "none";
}

/** One pipe's state; starts in "handshaking". */
export class PipeStateMachine {
  private current: PipeState = "handshaking";

  get state(): PipeState {
    return this.current;
  }

  /** Moves to `to`; throws IllegalPipeTransitionError (and stays) when PIPE_TRANSITIONS does not allow it. */
  transition(to: PipeState): void {
    if (!PIPE_TRANSITIONS[this.current].includes(to)) throw new IllegalPipeTransitionError(this.current, to);
    this.current = to;
  }
}
