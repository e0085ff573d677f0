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

export function fmtBytes(n) {
  if (n == null) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + units[i];
}

export function fmtNum(n, digits = 1) {
  if (n == null) return "—";
  if (Number.isInteger(n)) return String(n);
  return n.toFixed(digits);
}

export function fmtAge(seconds) {
  if (seconds == null) return "—";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}
