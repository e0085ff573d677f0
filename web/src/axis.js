// The operations charts' axes, as pure functions (web/test/axis.test.mjs).
//
// Byte axes put their ticks on multiples of 1, 2 or 5 × 1024^k bytes (1, 2,
// 5, …, 500 B, 1 KiB, 2 KiB, …), so every tick is a whole number of the
// step's unit and prints exactly ("0 MiB, 2 MiB, 4 MiB", "0 KiB, 500 KiB,
// 1000 KiB"), never a decimal value rounded into a binary unit.

export const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

const STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500];

// BYTE_INCRS are the byte axis's possible tick steps, smallest first.
export const BYTE_INCRS = BYTE_UNITS.flatMap((_, u) => STEPS.map((m) => m * 1024 ** u));

// unitOf returns the index of the unit a step is a whole multiple of.
function unitOf(incr) {
  let u = 0;
  while (u < BYTE_UNITS.length - 1 && incr >= 1024 ** (u + 1)) u++;
  return u;
}

// byteAxis lays out a byte axis from 0 to max on heightPx pixels with
// ticks at least space pixels apart: the smallest step of BYTE_INCRS that
// keeps them apart, the ticks (multiples of it up to max) and their labels
// in the step's unit (units: the unit names, BYTE_UNITS translated).
export function byteAxis(max, heightPx, space = 30, units = BYTE_UNITS) {
  const top = max > 0 ? max : 1;
  const most = Math.max(1, Math.floor(heightPx / space));
  const incr = BYTE_INCRS.find((i) => top / i <= most) ?? BYTE_INCRS[BYTE_INCRS.length - 1];
  const ticks = [];
  for (let k = 0; k * incr <= top + 1e-9; k++) ticks.push(k * incr);
  return { incr, ticks, labels: byteLabels(ticks, units) };
}

// byteLabels labels evenly spaced byte ticks (from 0, as byteAxis lays
// them out) in the unit their step is a whole multiple of.
export function byteLabels(ticks, units = BYTE_UNITS) {
  const incr = ticks.length > 1 ? ticks[1] - ticks[0] : ticks[0] || 1;
  const u = unitOf(incr);
  return ticks.map((v) => Math.round(v / 1024 ** u) + " " + units[u]);
}

// byteRange is the byte axis's scale: from 0 to the next tick step above
// the data's maximum (so the top line is a labelled tick).
export function byteRange(max, heightPx, space = 30) {
  const { incr } = byteAxis(max, heightPx, space);
  return [0, Math.max(incr, Math.ceil((max || 0) / incr) * incr)];
}

// timeLabels formats time axis ticks (Unix seconds) in lang: hours,
// minutes and seconds, with the day and month when the ticks span more
// than a day. Intl names the months in lang, so the Russian page shows
// no English month or AM/PM.
export function timeLabels(splits, lang) {
  const span = splits.length > 1 ? splits[splits.length - 1] - splits[0] : 0;
  const opts = { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" };
  if (span > 86400) Object.assign(opts, { day: "numeric", month: "short" });
  const f = new Intl.DateTimeFormat(lang, opts);
  return splits.map((s) => (s == null ? "" : f.format(new Date(s * 1000))));
}
