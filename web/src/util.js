import { useEffect, useRef } from "preact/hooks";
import { Unauthorized } from "./api.js";

// usePoll calls fn every ms milliseconds while enabled (and once at once).
export function usePoll(fn, ms, deps, enabled = true) {
  const saved = useRef(fn);
  saved.current = fn;
  useEffect(() => {
    if (!enabled) return undefined;
    let stopped = false;
    let timer;
    const tick = async () => {
      try {
        await saved.current();
      } finally {
        if (!stopped) timer = setTimeout(tick, ms);
      }
    };
    tick();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [...deps, enabled, ms]);
}

// guard turns a 401 into the token prompt and returns null; other errors
// are rethrown.
export async function guard(auth, promise) {
  try {
    return await promise;
  } catch (e) {
    if (e instanceof Unauthorized) {
      auth.unauthorized();
      return null;
    }
    throw e;
  }
}

export function short(id) {
  return id ? id.slice(0, 8) + "…" + id.slice(-4) : "";
}

export function fmtTime(s) {
  if (!s) return "";
  const d = new Date(s);
  if (isNaN(d)) return s;
  return d.toISOString().replace("T", " ").replace(/\.(\d{3})\d*Z$/, ".$1Z");
}

// units returns the byte unit names of t's language.
export function byteUnits(t) {
  return ["B", "KiB", "MiB", "GiB", "TiB"].map((u) => t("unit." + u));
}

// fmtBytes formats a reading (not an axis tick: see axis.js) in binary
// units of t's language, with one decimal.
export function fmtBytes(n, t) {
  if (n == null) return "—";
  const units = byteUnits(t);
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return fmtNum(i === 0 ? Math.round(v) : v, 1, t) + " " + units[i];
}

// fmtNum formats a number in t's language (a decimal comma in Russian).
export function fmtNum(n, digits = 1, t) {
  if (n == null) return "—";
  const lang = (t && t.lang) || "en";
  const opts = Number.isInteger(n) ? { maximumFractionDigits: 0 } : { minimumFractionDigits: digits, maximumFractionDigits: digits };
  return new Intl.NumberFormat(lang, { ...opts, useGrouping: false }).format(n);
}

// fmtAge formats a duration in seconds in t's units.
export function fmtAge(seconds, t) {
  if (seconds == null) return "—";
  const s = Math.max(0, Math.round(seconds));
  const [us, umin, uh] = [t("unit.s"), t("unit.min"), t("unit.h")];
  const part = (n, u) => (n > 0 ? n + " " + u : "");
  if (s < 60) return s + " " + us;
  if (s < 3600) return [part(Math.floor(s / 60), umin), part(s % 60, us)].filter(Boolean).join(" ");
  return [part(Math.floor(s / 3600), uh), part(Math.floor((s % 3600) / 60), umin)].filter(Boolean).join(" ");
}
