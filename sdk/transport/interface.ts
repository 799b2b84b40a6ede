/**
 * Transports carry a pipe's control bytes (message headers and structured
 * payloads, and on TCP-only pipes the tensor bytes too) between two
 * processes. They never see a Tensor. Channels (sdk/channel) move bulk
 * tensor bytes over whatever path is fastest for a device pair.
 *
 * Protocol story of a connection:
 * 1. The connector opens a byte stream (TCP here; shm/UCX later) to the listener.
 * 2. Both sides run the mutual challenge–response of ./auth.ts; nothing else
 *    is read before it succeeds, and a failure closes the stream.
 * 3. The connection then delivers the peer's bytes in order (`onData`) and
 *    writes ours with back-pressure (`write` resolves once the bytes are
 *    handed to the OS). Framing is the wire layer's job.
 * 4. `close()` is idempotent; `onClose` fires exactly once, with the error
 *    that ended the connection if it did not end by our own close().
 */

export interface TransportConnection {
  /** A short description of the peer, e.g. "tcp://127.0.0.1:41234". */
  readonly remote: string;
  /** Writes the chunks in order; resolves when the OS took them (back-pressure). Rejects after close. */
  write(chunks: readonly Uint8Array[]): Promise<void>;
  /** Receives the peer's bytes in order. One listener; set before data is expected. */
  onData(cb: (chunk: Uint8Array) => void): void;
  /** Called once when the connection ends: error is null after our own close(). */
  onClose(cb: (error: Error | null) => void): void;
  /** Ends the connection; safe to call more than once. */
  close(): void;
  readonly closed: boolean;
}

export interface TransportListener {
  /** The address peers connect to, e.g. { host: "127.0.0.1", port: 41234 }. */
  readonly address: { host: string; port: number };
  /** Authenticated inbound connections; refused peers never reach this callback. */
  onConnection(cb: (conn: TransportConnection) => void): void;
  /** Peers that failed authentication (for logging; the connection is already closed). */
  onRefused(cb: (remote: string, error: Error) => void): void;
  close(): Promise<void>;
}

export interface Transport {
  /** "tcp", "shm", "ucx", ... */
  readonly name: string;
  /** False when this machine cannot run the transport; never throws. */
  isViable(): boolean;
  listen(opts: { host: string; port: number; secret: string | Buffer }): Promise<TransportListener>;
  connect(opts: {
    host: string;
    port: number;
    secret: string | Buffer;
    timeoutMs?: number;
  }): Promise<TransportConnection>;
}
