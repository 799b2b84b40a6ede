/**
 * The msgpack codec of the pipe's handshake bodies (HELLO, ACCEPT, SETUP and
 * REFUSE frames; ./handshake.ts gives their shapes). The wire layer is not
 * importable from here (scripts/check-layers.mjs), so this is a msgpackr
 * Packr/Unpackr of its own with the same plain settings: no records, no
 * structured clone, maps as objects, Uint8Arrays as msgpack bin.
 *
 * Decoding treats the bytes as hostile. Before msgpackr sees them, `scanBody`
 * walks them once with an explicit stack and throws ProtocolError on:
 * 1. any extension type (msgpackr's built-ins and, since msgpackr keeps
 *    extensions in module globals, the wire layer's tensor and error types);
 * 2. nesting deeper than MAX_DEPTH;
 * 3. a map key that is not a string, or is "__proto__" (msgpackr would rename it);
 * 4. a length that runs past the end, trailing bytes, and the unused byte 0xc1.
 * What passes holds only nil, booleans, numbers, strings, bytes, arrays and
 * string-keyed maps: a SetupValue. Anything msgpackr still throws becomes a
 * ProtocolError too.
 */
import { type Options, Packr, Unpackr } from "msgpackr";
import { ProtocolError } from "../errors/index.js";

/** Deepest nesting a handshake body may have (arrays and maps count one each). */
export const MAX_DEPTH = 32;

const OPTIONS: Options = {
  useRecords: false,
  structuredClone: false,
  moreTypes: false,
  bundleStrings: false,
  mapsAsObjects: true,
};

// NB: skipValues (in msgpackr, not in its typings) drops undefined fields as JSON did, where msgpackr
// would write its undefined extension, which scanBody refuses; undefined in an array becomes nil.
const packr = new Packr({ ...OPTIONS, encodeUndefinedAsNil: true, skipValues: [undefined] } as Options);
// NB: copyBuffers: bytes fields get memory of their own, not a view of the connection's chunk
const unpackr = new Unpackr({ ...OPTIONS, copyBuffers: true });

/** One handshake body as msgpack. */
export function encodeBody(value: unknown): Uint8Array {
  return packr.pack(value);
}

/** The value of a handshake body; ProtocolError unless it is one plain msgpack value (see the file comment). */
export function decodeBody(body: Uint8Array): unknown {
  scanBody(body);
  try {
    return unpackr.unpack(body);
  } catch (e) {
    throw new ProtocolError(`bad pipe frame: body is not msgpack (${(e as Error).message})`);
  }
}

const PROTO_KEY = [0x5f, 0x5f, 0x70, 0x72, 0x6f, 0x74, 0x6f, 0x5f, 0x5f]; // "__proto__"

/** Throws ProtocolError unless `src` is exactly one plain msgpack value within MAX_DEPTH. */
export function scanBody(src: Uint8Array): void {
  const n = src.byteLength;
  const view = new DataView(src.buffer, src.byteOffset, n);
  // remaining[d]: items still expected at depth d; in a map (isMap[d]) an even count left means a key is next
  const remaining: number[] = [1];
  const isMap: boolean[] = [false];
  let pos = 0;
  const fail = (why: string): never => {
    throw new ProtocolError(`bad pipe frame: ${why}`);
  };
  const need = (k: number): void => {
    if (pos + k > n) fail(`body truncated at byte ${pos} (needs ${k} more)`);
  };
  const uint = (k: 1 | 2 | 4): number => {
    need(k);
    const v = k === 1 ? src[pos]! : k === 2 ? view.getUint16(pos) : view.getUint32(pos);
    pos += k;
    return v;
  };
  const skip = (k: number): void => {
    need(k);
    pos += k;
  };
  const open = (items: number, map: boolean): void => {
    if (remaining.length > MAX_DEPTH) fail(`body nests deeper than ${MAX_DEPTH} levels`);
    // NB: every item takes at least one byte, so a count beyond the bytes left is a lie; refuse it before looping
    if (items > n - pos) fail(`a container of ${items} items at byte ${pos} runs past the end`);
    remaining.push(items);
    isMap.push(map);
  };
  const str = (len: number, atKey: boolean): void => {
    need(len);
    if (atKey && len === PROTO_KEY.length && PROTO_KEY.every((c, i) => src[pos + i] === c))
      fail('a map key "__proto__" (refused: prototype pollution)');
    pos += len;
  };
  while (remaining.length > 0) {
    const top = remaining.length - 1;
    if (remaining[top] === 0) {
      remaining.pop();
      isMap.pop();
      continue;
    }
    const atKey = isMap[top]! && remaining[top]! % 2 === 0;
    remaining[top]!--;
    need(1);
    const b = src[pos++]!;
    const isStr = (b >= 0xa0 && b <= 0xbf) || b === 0xd9 || b === 0xda || b === 0xdb;
    if (atKey && !isStr) fail(`a map key at byte ${pos - 1} is not a string`);
    if (b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3) continue;
    if (b >= 0xa0 && b <= 0xbf) str(b - 0xa0, atKey);
    else if (b >= 0x90 && b <= 0x9f) open(b - 0x90, false);
    else if (b >= 0x80 && b <= 0x8f) open(2 * (b - 0x80), true);
    else
      switch (b) {
        case 0xcc: // uint8, int8
        case 0xd0:
          skip(1);
          break;
        case 0xcd: // uint16, int16
        case 0xd1:
          skip(2);
          break;
        case 0xca: // float32, uint32, int32
        case 0xce:
        case 0xd2:
          skip(4);
          break;
        case 0xcb: // float64, uint64, int64
        case 0xcf:
        case 0xd3:
          skip(8);
          break;
        case 0xd9:
          str(uint(1), atKey);
          break;
        case 0xda:
          str(uint(2), atKey);
          break;
        case 0xdb:
          str(uint(4), atKey);
          break;
        case 0xc4: // bin8, bin16, bin32
          skip(uint(1));
          break;
        case 0xc5:
          skip(uint(2));
          break;
        case 0xc6:
          skip(uint(4));
          break;
        case 0xdc:
          open(uint(2), false);
          break;
        case 0xdd:
          open(uint(4), false);
          break;
        case 0xde:
          open(2 * uint(2), true);
          break;
        case 0xdf:
          open(2 * uint(4), true);
          break;
        default:
          fail(
            b === 0xc1
              ? `invalid msgpack byte 0xc1 at ${pos - 1}`
              : `msgpack extension type (byte 0x${b.toString(16)} at ${pos - 1}) in a handshake body`,
          );
      }
  }
  if (pos !== n) fail(`${n - pos} trailing bytes after the body's value`);
}
