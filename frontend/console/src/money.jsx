// Money as the API gives it (an exact decimal string: "0.0000525") and as a person
// reads it: "$0.000053". Figures are rounded here from the string's digits, never
// through a float, to two decimals from a dollar up and two significant digits below
// (a small cost keeps the digits that say it; nothing that cost something reads
// $0.00); the exact figure is in the title. A request nobody could price is never
// counted as free: a cost that covers only some requests says so.

const SYMBOLS = { USD: "$" };

// "0.0000525", "-1.5", "12", "1E-7" → { negative, digits, scale }: the value is
// ±digits × 10^-scale, digits a BigInt. Null when it is no number.
export function parseDecimal(text) {
  const match = /^([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(String(text ?? "").trim());
  if (!match || !(match[2] || match[3])) return null;
  const [, sign, whole, fraction = "", exponent = "0"] = match;
  let scale = fraction.length - Number(exponent);
  let digits = BigInt((whole || "0") + fraction);
  if (scale < 0) {
    digits *= 10n ** BigInt(-scale);
    scale = 0;
  }
  return { negative: sign === "-" && digits !== 0n, digits, scale };
}

// `value` (a parsed decimal) rounded half up to `places` decimals, as plain digits
// with the whole part grouped: "1,234.50", "0.000053".
function fixed({ digits, scale }, places) {
  let rounded = digits;
  if (scale > places) {
    const unit = 10n ** BigInt(scale - places);
    rounded = (digits + unit / 2n) / unit;
  } else {
    rounded = digits * 10n ** BigInt(places - scale);
  }
  const text = rounded.toString().padStart(places + 1, "0");
  const whole = BigInt(text.slice(0, text.length - places)).toLocaleString("en-US");
  return places ? `${whole}.${text.slice(text.length - places)}` : whole;
}

// How many decimals show `value`: 2 from 1 up, else enough for 2 significant digits.
function places({ digits, scale }) {
  const length = digits.toString().length; // digits below 1: `scale` in all
  if (digits === 0n || length > scale) return 2;
  const zeros = scale - length; // between the point and the first significant digit
  return Math.max(2, zeros + 2);
}

// A decimal string as money: "$0.000053", "$1,234.50", "12.00 EUR". `exact`: the
// figure as given, with its currency, for a title.
export function money(text, currency = "USD") {
  const value = parseDecimal(text);
  if (!value) return { shown: String(text ?? ""), exact: String(text ?? "") };
  // Zeros past the second decimal that rounding left say nothing: $0.0001, not $0.000100.
  const digits = `${value.negative ? "-" : ""}${fixed(value, places(value))}`.replace(/(\.\d\d\d*?)0+$/, "$1");
  const symbol = SYMBOLS[currency];
  return {
    shown: symbol ? digits.replace(/^(-?)/, `$1${symbol}`) : `${digits} ${currency}`,
    exact: `${text} ${currency}`,
  };
}

// What a usage's cost says: { text, title, kind }, kind one of "priced", "partial"
// (some requests unpriced: the cost is a lower bound), "unpriced" (none priced:
// unknown, not 0), "none" (no request yet, or usage written before costs were kept).
// `brief`: a partial cost as its lower bound alone ("≥ $0.0012"), where the count of
// unpriced requests is said beside it.
export function costOf(usage, { brief = false } = {}) {
  const requests = usage?.requests ?? 0;
  const unpriced = usage?.unpriced_requests ?? 0;
  const cost = usage?.cost;
  const currency = usage?.currency || "USD";
  const plural = (n, one) => `${n.toLocaleString()} ${one}${n === 1 ? "" : "s"}`;
  if (!usage || (cost === undefined && !unpriced)) {
    return requests
      ? { kind: "none", text: "–", title: "no cost recorded (its usage predates costs)" }
      : { kind: "none", text: "–", title: "no model request yet" };
  }
  if (cost === null || cost === undefined) {
    return {
      kind: "unpriced",
      text: "unpriced",
      title: `${plural(unpriced, "request")} with no known price: the cost is unknown, not 0`,
    };
  }
  if (!requests && !unpriced && !parseDecimal(cost)?.digits) {
    return { kind: "none", text: "–", title: "no model request yet" };
  }
  const { shown, exact } = money(cost, currency);
  if (unpriced) {
    return {
      kind: "partial",
      text: brief ? `≥ ${shown}` : `≥ ${shown} · ${unpriced.toLocaleString()} unpriced`,
      title: `${exact} for the priced requests; ${plural(unpriced, "request")} with no known price not counted`,
    };
  }
  return { kind: "priced", text: shown, title: exact };
}

// A usage's cost, as `costOf` says it.
export function Cost({ usage, brief = false }) {
  const { kind, text, title } = costOf(usage, { brief });
  return (
    <span class={`cost ${kind}`} data-cost={usage?.cost ?? undefined} title={title}>
      {text}
    </span>
  );
}
