/**
 * A tolerant free-name scan of a JavaScript function or class source, so shipped
 * code that uses a name the callee cannot resolve fails before it runs.
 *
 * 1. `tokenize` splits the source into names, punctuators and literals (strings,
 *    template chunks, regexes and comments never yield names).
 * 2. `scanFreeNames` walks the tokens once with a stack of bracket contexts
 *    (block, object literal, class body, parens) and collects
 *    - references: names not after `.`, not object keys, class member names or labels;
 *    - declarations: names bound by var/let/const (incl. destructuring), function and
 *      class names, parameters (arrow, function, method, catch);
 *    - `exports.NAME` references (tslab's form of a name from an earlier cell).
 *    Free names = references − declarations − keywords.
 *
 * NB: scopes are not modelled: a name declared anywhere in the source counts as
 * declared everywhere, and names in parameter defaults count as declared. Both
 * only hide free names (the callee then fails at run time, still naming them); the
 * scan is built never to report a name that is in fact bound.
 */

export interface Token {
  type: "name" | "private" | "punct" | "num" | "str" | "regex";
  value: string;
  /** A line break precedes this token (for automatic semicolon insertion). */
  nl: boolean;
}

export interface FreeNameScan {
  /** Bare names the source uses but does not declare (keywords excluded). */
  free: Set<string>;
  /** NAME of every `exports.NAME` / `exports?.NAME` the source uses. */
  exportsRefs: Set<string>;
}

const KEYWORDS = new Set(
  (
    "break case catch class const continue debugger default delete do else export extends finally for function " +
    "if import in instanceof new return super switch this throw try typeof var void while with yield let static " +
    "await async of null true false arguments enum implements interface package private protected public"
  ).split(" "),
);
/** Names after which `/` starts a regex and `{` starts an object literal. */
const EXPR_KEYWORDS = new Set(
  "return typeof instanceof in of new delete void throw case yield await extends".split(" "),
);
const BLOCK_KEYWORDS = new Set(["else", "try", "finally", "do"]);
/** Keywords followed by `( ... ) {` that is not a parameter list. */
const STMT_PARENS = new Set(["if", "while", "for", "switch", "with", "await"]);
const MODIFIERS = new Set(["get", "set", "async", "static", "accessor"]);
const PUNCTS = [
  ">>>=", "...", "===", "!==", "**=", "<<=", ">>=", ">>>", "&&=", "||=", "??=",
  "=>", "==", "!=", "<=", ">=", "&&", "||", "??", "?.", "++", "--", "+=", "-=", "*=", "%=", "&=", "|=", "^=",
  "**", "<<", ">>",
]; // prettier-ignore
const NAME_RE = /[\p{ID_Start}$_][\p{ID_Continue}$\u200c\u200d]*/uy;
const NUM_RE = /(?:0[xXoObB][\da-fA-F_]+|(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?)n?/y;

function regexAllowed(prev: Token | undefined): boolean {
  if (!prev) return true;
  if (prev.type === "punct") return prev.value !== ")" && prev.value !== "]" && prev.value !== "}";
  return prev.type === "name" && EXPR_KEYWORDS.has(prev.value);
}

/** Splits `src` into tokens. A template `a${x}b` becomes str ( x ) str, so substitutions are scanned. */
export function tokenize(src: string): Token[] {
  const out: Token[] = [];
  /** Brace depth at each open `${`, to know which `}` resumes the template. */
  const templates: number[] = [];
  let braces = 0;
  let nl = false;
  let i = 0;
  const push = (type: Token["type"], value: string) => {
    out.push({ type, value, nl });
    nl = false;
  };
  const readTemplate = () => {
    // i is just past "`" or the "}" closing a substitution
    for (;;) {
      if (i >= src.length) return push("str", "`");
      const c = src[i];
      if (c === "\\") i += 2;
      else if (c === "`") return (i++, push("str", "`"));
      else if (c === "$" && src[i + 1] === "{") {
        i += 2;
        push("str", "`");
        push("punct", "(");
        templates.push(braces);
        return;
      } else i++;
    }
  };
  while (i < src.length) {
    const c = src[i];
    if (c === "\n" || c === "\r" || c === "\u2028" || c === "\u2029") {
      nl = true;
      i++;
    } else if (c === " " || c === "\t" || c === "\v" || c === "\f" || c === "\ufeff" || c === "\u00a0") i++;
    else if (c === "/" && src[i + 1] === "/") {
      while (i < src.length && src[i] !== "\n" && src[i] !== "\r") i++;
    } else if (c === "/" && src[i + 1] === "*") {
      const end = src.indexOf("*/", i + 2);
      const stop = end < 0 ? src.length : end + 2;
      if (/[\n\r\u2028\u2029]/.test(src.slice(i, stop))) nl = true;
      i = stop;
    } else if (c === '"' || c === "'") {
      let j = i + 1;
      while (j < src.length && src[j] !== c) j += src[j] === "\\" ? 2 : 1;
      i = j + 1;
      push("str", c);
    } else if (c === "`") {
      i++;
      readTemplate();
    } else if (c === "}" && templates.length > 0 && templates[templates.length - 1] === braces) {
      templates.pop();
      i++;
      push("punct", ")");
      readTemplate();
    } else if (c === "/" && regexAllowed(out[out.length - 1])) {
      let j = i + 1;
      let inClass = false;
      while (j < src.length && src[j] !== "\n") {
        const d = src[j];
        if (d === "\\") j++;
        else if (d === "[") inClass = true;
        else if (d === "]") inClass = false;
        else if (d === "/" && !inClass) break;
        j++;
      }
      j++;
      NAME_RE.lastIndex = j;
      if (NAME_RE.exec(src)) j = NAME_RE.lastIndex; // flags
      i = j;
      push("regex", "/");
    } else if (c === "#") {
      NAME_RE.lastIndex = i + 1;
      const m = NAME_RE.exec(src);
      i = m ? NAME_RE.lastIndex : i + 1;
      push("private", m ? m[0] : "#");
    } else if ((c >= "0" && c <= "9") || (c === "." && src[i + 1] >= "0" && src[i + 1] <= "9")) {
      NUM_RE.lastIndex = i;
      NUM_RE.exec(src);
      i = Math.max(NUM_RE.lastIndex, i + 1);
      push("num", "0");
    } else {
      NAME_RE.lastIndex = i;
      const m = NAME_RE.exec(src);
      if (m) {
        i = NAME_RE.lastIndex;
        push("name", m[0]);
        continue;
      }
      let p = PUNCTS.find((q) => src.startsWith(q, i)) ?? c;
      if (p === "?." && src[i + 2] >= "0" && src[i + 2] <= "9") p = "?"; // a ?.5 : b
      if (p === "{") braces++;
      if (p === "}") braces--;
      i += p.length;
      push("punct", p);
    }
  }
  return out;
}

type Ctx = {
  kind: "block" | "object" | "class" | "paren" | "bracket";
  /** Object: at a property start. Class: at a member start. */
  start: boolean;
  /** Open `?` awaiting their `:`. */
  ternary: number;
};

const OPEN: Record<string, Ctx["kind"]> = { "(": "paren", "[": "bracket" };

/** Free names and `exports.NAME` references of a function or class source (or any expression). */
export function scanFreeNames(src: string): FreeNameScan {
  const t = tokenize(src);
  const n = t.length;
  const match = new Int32Array(n).fill(-1);
  const opens: number[] = [];
  for (let i = 0; i < n; i++) {
    if (t[i].type !== "punct") continue;
    const v = t[i].value;
    if (v === "(" || v === "[" || v === "{") opens.push(i);
    else if (v === ")" || v === "]" || v === "}") {
      const o = opens.pop();
      if (o !== undefined) ((match[o] = i), (match[i] = o));
    }
  }
  const is = (i: number, type: Token["type"], value?: string) =>
    i >= 0 && i < n && t[i].type === type && (value === undefined || t[i].value === value);
  const isName = (i: number) => is(i, "name") && !KEYWORDS.has(t[i].value);

  const declared = new Set<string>();
  const refs = new Set<string>();
  const exportsRefs = new Set<string>();
  /** Token indexes that are bindings, keys or labels (never references). */
  const skip = new Set<number>();

  /** Every name in the bracketed pattern or param list opened at i (not keys, not after `.`). */
  const declarePattern = (i: number) => {
    const end = match[i] < 0 ? n : match[i];
    for (let j = i + 1; j < end; j++)
      if (isName(j) && !is(j + 1, "punct", ":") && !is(j - 1, "punct", ".") && !is(j - 1, "punct", "?.")) {
        declared.add(t[j].value);
        skip.add(j);
      }
  };
  /** A binding at i (name or pattern); returns the index after it. */
  const declareBinding = (i: number): number => {
    if (isName(i)) {
      declared.add(t[i].value);
      skip.add(i);
      return i + 1;
    }
    if (is(i, "punct", "{") || is(i, "punct", "[")) {
      declarePattern(i);
      return match[i] < 0 ? n : match[i] + 1;
    }
    return i;
  };
  /** var/let/const at i: the first binding and every `, binding` of the same statement. */
  const declareStatement = (i: number) => {
    let j = declareBinding(i + 1);
    for (let depth = 0; j < n; j++) {
      const tk = t[j];
      if (depth === 0 && tk.nl && tk.type === "name" && !is(j - 1, "punct") && !is(j - 1, "name", "in")) return;
      if (depth === 0 && tk.nl && tk.type === "name" && is(j - 1, "punct") && /^[)\]}]$/.test(t[j - 1].value)) return;
      if (tk.type !== "punct") {
        if (depth === 0 && tk.type === "name" && (tk.value === "in" || tk.value === "of")) return;
        continue;
      }
      if (tk.value === "(" || tk.value === "[" || tk.value === "{") depth++;
      else if (tk.value === ")" || tk.value === "]" || tk.value === "}") {
        if (--depth < 0) return;
      } else if (depth === 0 && tk.value === ";") return;
      else if (depth === 0 && tk.value === ",") j = declareBinding(j + 1) - 1;
    }
  };
  /** `(` opens parameters: of an arrow, a function, a catch clause, or a method (incl. computed keys, accessors). */
  const isParamList = (i: number): boolean => {
    const close = match[i];
    if (close >= 0 && is(close + 1, "punct", "=>")) return true;
    if (is(i - 1, "name", "function") || is(i - 1, "name", "catch")) return true;
    if (is(i - 1, "punct", "*") && is(i - 2, "name", "function")) return true;
    if (isName(i - 1) && (is(i - 2, "name", "function") || (is(i - 2, "punct", "*") && is(i - 3, "name", "function"))))
      return true;
    // `key(...) {` with a key that is not a statement keyword: a method
    return (
      close >= 0 &&
      is(close + 1, "punct", "{") &&
      !(i > 0 && t[i - 1].type === "name" && STMT_PARENS.has(t[i - 1].value))
    );
  };

  const stack: Ctx[] = [{ kind: "block", start: false, ternary: 0 }];
  let classPending = -1; // stack depth at which `class` awaits its body
  let stmtColon = false; // the last `:` ended a label/case (a following `{` is a block)
  for (let i = 0; i < n; i++) {
    const tk = t[i];
    const ctx = stack[stack.length - 1];
    const prev = i > 0 ? t[i - 1] : undefined;
    if (tk.type === "punct") {
      const v = tk.value;
      if (v === "(" && isParamList(i)) declarePattern(i);
      if (v === "(" || v === "[") {
        stack.push({ kind: OPEN[v], start: false, ternary: 0 });
        continue;
      }
      if (v === "{") {
        let kind: Ctx["kind"];
        if (classPending === stack.length) ((kind = "class"), (classPending = -1));
        else if (!prev || prev.type === "str" || prev.type === "num" || prev.type === "regex") kind = "block";
        else if (prev.type === "name") kind = EXPR_KEYWORDS.has(prev.value) ? "object" : "block";
        else if (prev.type === "private") kind = "block";
        else if (prev.value === ":") kind = ctx.kind === "block" && stmtColon ? "block" : "object";
        else kind = /^(\)|=>|;|\{|\})$/.test(prev.value) ? "block" : "object";
        if (ctx.kind === "class" && ctx.start && is(i - 1, "name", "static")) kind = "block";
        stack.push({ kind, start: kind === "object" || kind === "class", ternary: 0 });
        continue;
      }
      if (v === ")" || v === "]" || v === "}") {
        if (stack.length > 1) stack.pop();
        const outer = stack[stack.length - 1];
        if (v === "}" && outer.kind === "class") outer.start = true;
        else outer.start = false;
        continue;
      }
      if (v === "?") ctx.ternary++;
      if (v === ":") {
        stmtColon = ctx.ternary === 0;
        if (ctx.ternary > 0) ctx.ternary--;
      }
      if (ctx.kind === "object") ctx.start = v === ",";
      else if (ctx.kind === "class") ctx.start = v === ";" || (v === "*" && ctx.start);
      continue;
    }
    if (tk.type !== "name") {
      if (ctx.kind === "object" || ctx.kind === "class") ctx.start = false;
      continue;
    }
    const v = tk.value;
    // member names and keys
    if (ctx.kind === "class" && (ctx.start || (tk.nl && stack.length === classDepth(stack)))) {
      const modifier =
        MODIFIERS.has(v) && (isName(i + 1) || is(i + 1, "name") || /^[[*{]$/.test(t[i + 1]?.value ?? ""));
      const modOrPrivate = modifier || is(i + 1, "private") || is(i + 1, "str") || is(i + 1, "num");
      ctx.start = modOrPrivate;
      if (is(i + 1, "punct", "(")) declarePattern(i + 1);
      skip.add(i);
      continue;
    }
    if (ctx.kind === "object" && ctx.start) {
      const modifier = MODIFIERS.has(v) && (is(i + 1, "name") || /^[[*]$/.test(t[i + 1]?.value ?? ""));
      if (modifier || is(i + 1, "private") || is(i + 1, "str") || is(i + 1, "num")) {
        skip.add(i);
        continue;
      }
      ctx.start = false;
      if (is(i + 1, "punct", ":")) {
        skip.add(i);
        continue;
      }
      if (is(i + 1, "punct", "(")) {
        declarePattern(i + 1);
        skip.add(i);
        continue;
      }
      // shorthand property: a reference
    } else if (ctx.kind === "object" || ctx.kind === "class") ctx.start = false;
    if (prev && prev.type === "punct" && (prev.value === "." || prev.value === "?.")) continue;
    if (prev && prev.type === "name" && (prev.value === "break" || prev.value === "continue") && !tk.nl) continue;
    if (v === "class") {
      if (isName(i + 1) && t[i + 1].value !== "extends") (declared.add(t[i + 1].value), skip.add(i + 1));
      classPending = stack.length;
      continue;
    }
    if (v === "function") {
      const j = is(i + 1, "punct", "*") ? i + 2 : i + 1;
      if (isName(j)) (declared.add(t[j].value), skip.add(j));
      continue;
    }
    if (v === "var" || v === "let" || v === "const") {
      declareStatement(i);
      continue;
    }
    if (KEYWORDS.has(v) || skip.has(i)) continue;
    if (prev && prev.type === "name" && prev.value === "typeof") continue; // legal on undeclared names
    if (is(i + 1, "punct", "=>")) {
      declared.add(v);
      continue;
    }
    if (
      ctx.kind === "block" &&
      is(i + 1, "punct", ":") &&
      ctx.ternary === 0 &&
      (!prev || tk.nl || (prev.type === "punct" && /^[;{}]$/.test(prev.value)))
    )
      continue; // a label
    if (v === "exports" && (is(i + 1, "punct", ".") || is(i + 1, "punct", "?.")) && is(i + 2, "name"))
      exportsRefs.add(t[i + 2].value);
    refs.add(v);
  }
  const free = new Set<string>();
  for (const r of refs) if (!declared.has(r) && r !== "exports") free.add(r);
  return { free, exportsRefs };
}

/** Depth of the innermost class body on the stack (stack length when it is on top). */
function classDepth(stack: Ctx[]): number {
  for (let k = stack.length - 1; k >= 0; k--) if (stack[k].kind === "class") return k + 1;
  return -1;
}
