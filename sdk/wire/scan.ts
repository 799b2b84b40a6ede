/**
 * A structural pre-check of a msgpack payload, run before msgpackr sees a byte of it.
 *
 * msgpackr decodes recursively, has no depth limit, accepts record definitions and a
 * dozen built-in extension types (RegExp, typed arrays, structured-clone references),
 * and renames `__proto__` keys silently. This scanner walks the bytes once with an
 * explicit stack (so hostile nesting cannot overflow ours) and rejects, with a
 * ProtocolError:
 * 1. nesting deeper than `maxDepth` (arrays, maps and extension tags each count one);
 * 2. any extension type not in the allow-list: the wire types registered with
 *    registerWireType (only in the tag form msgpackr writes for them: fixext1 with a
 *    zero data byte, followed by the tagged value), undefined (0), bigint (0x42, at most
 *    MAX_BIGINT_BYTES) and timestamps (-1);
 * 3. a map key equal to "__proto__" (msgpackr would rename it; we refuse instead);
 * 4. lengths that run past the end, trailing bytes, and the never-used byte 0xc1.
 */
import { ProtocolError } from "../errors/index.js";

export const EXT_UNDEFINED = 0x00;
export const EXT_BIGINT = 0x42;
export const EXT_TIMESTAMP = 0xff;
const MAX_BIGINT_BYTES = 1024;
const PROTO_KEY = [0x5f, 0x5f, 0x70, 0x72, 0x6f, 0x74, 0x6f, 0x5f, 0x5f]; // "__proto__"

/** Throws a ProtocolError unless `src` is exactly one well-formed msgpack value within the limits. */
export function scanPayload(src: Uint8Array, maxDepth: number, isTag: (code: number) => boolean): void {
  const n = src.byteLength;
  const view = new DataView(src.buffer, src.byteOffset, n);
  // remaining[d]: items still expected at depth d; isMap[d]: counts key/value slots; the
  // slot parity tells a key (even remaining) from a value.
  const remaining: number[] = [1];
  const isMap: boolean[] = [false];
  let pos = 0;
  const need = (k: number): void => {
    if (pos + k > n) throw new ProtocolError(`bad payload: truncated at byte ${pos} (needs ${k} more)`);
  };
  const open = (count: number, map: boolean, minBytesPerItem: number): void => {
    if (remaining.length >= maxDepth + 1)
      throw new ProtocolError(`bad payload: nesting deeper than ${maxDepth} levels`);
    if (count * minBytesPerItem > n - pos)
      throw new ProtocolError(`bad payload: container of ${count} items at byte ${pos} runs past the end`);
    remaining.push(count);
    isMap.push(map);
  };
  while (remaining.length > 0) {
    const top = remaining.length - 1;
    if (remaining[top] === 0) {
      remaining.pop();
      isMap.pop();
      continue;
    }
    const atKey = isMap[top] === true && remaining[top]! % 2 === 0;
    remaining[top]!--;
    need(1);
    const b = src[pos++]!;
    if (b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3) continue;
    if (b >= 0xa0 && b <= 0xbf) {
      strBody(b - 0xa0, atKey);
      continue;
    }
    if (b >= 0x90 && b <= 0x9f) {
      open(b - 0x90, false, 1);
      continue;
    }
    if (b >= 0x80 && b <= 0x8f) {
      open(2 * (b - 0x80), true, 1);
      continue;
    }
    switch (b) {
      case 0xcc:
      case 0xd0:
        skip(1);
        break;
      case 0xcd:
      case 0xd1:
        skip(2);
        break;
      case 0xca:
      case 0xce:
      case 0xd2:
        skip(4);
        break;
      case 0xcb:
      case 0xcf:
      case 0xd3:
        skip(8);
        break;
      case 0xd9:
        need(1);
        strBody(src[pos++]!, atKey);
        break;
      case 0xda:
        need(2);
        pos += 2;
        strBody(view.getUint16(pos - 2), atKey);
        break;
      case 0xdb:
        need(4);
        pos += 4;
        strBody(view.getUint32(pos - 4), atKey);
        break;
      case 0xc4:
        need(1);
        skip(src[pos++]!);
        break;
      case 0xc5:
        need(2);
        pos += 2;
        skip(view.getUint16(pos - 2));
        break;
      case 0xc6:
        need(4);
        pos += 4;
        skip(view.getUint32(pos - 4));
        break;
      case 0xdc:
        need(2);
        pos += 2;
        open(view.getUint16(pos - 2), false, 1);
        break;
      case 0xdd:
        need(4);
        pos += 4;
        open(view.getUint32(pos - 4), false, 1);
        break;
      case 0xde:
        need(2);
        pos += 2;
        open(2 * view.getUint16(pos - 2), true, 1);
        break;
      case 0xdf:
        need(4);
        pos += 4;
        open(2 * view.getUint32(pos - 4), true, 1);
        break;
      case 0xd4: {
        need(2);
        const type = src[pos]!;
        if (isTag(type)) {
          if (src[pos + 1] !== 0)
            throw new ProtocolError(`bad payload: wire type 0x${type.toString(16)} tag is malformed`);
          pos += 2;
          open(1, false, 1); // the tagged value follows
        } else {
          pos++;
          ext(type, 1);
        }
        break;
      }
      case 0xd5:
        extData(2);
        break;
      case 0xd6:
        extData(4);
        break;
      case 0xd7:
        extData(8);
        break;
      case 0xd8:
        extData(16);
        break;
      case 0xc7:
        need(1);
        extData(src[pos++]!);
        break;
      case 0xc8:
        need(2);
        pos += 2;
        extData(view.getUint16(pos - 2));
        break;
      case 0xc9:
        need(4);
        pos += 4;
        extData(view.getUint32(pos - 4));
        break;
      default:
        throw new ProtocolError(`bad payload: invalid msgpack byte 0x${b.toString(16)} at ${pos - 1}`);
    }
  }
  if (pos !== n) throw new ProtocolError(`bad payload: ${n - pos} trailing bytes after the value`);

  function skip(k: number): void {
    need(k);
    pos += k;
  }
  function strBody(len: number, atKey: boolean): void {
    need(len);
    if (atKey && len === PROTO_KEY.length && PROTO_KEY.every((c, i) => src[pos + i] === c))
      throw new ProtocolError('bad payload: an object key "__proto__" (refused: prototype pollution)');
    pos += len;
  }
  function extData(len: number): void {
    need(1);
    ext(src[pos++]!, len);
  }
  function ext(type: number, len: number): void {
    const ok =
      (type === EXT_UNDEFINED && len === 1) ||
      (type === EXT_BIGINT && len <= MAX_BIGINT_BYTES) ||
      (type === EXT_TIMESTAMP && (len === 4 || len === 8 || len === 12));
    if (!ok)
      throw new ProtocolError(
        `bad payload: extension type 0x${type.toString(16)} (${len} bytes) is not a known wire type`,
      );
    skip(len);
  }
}
