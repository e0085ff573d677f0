// Unit tests of the charts' axes: `make web-test` (node --test).
import { test } from "node:test";
import assert from "node:assert/strict";
import { BYTE_INCRS, BYTE_UNITS, byteAxis, byteRange, timeLabels } from "../src/axis.js";

// parse reads a label back into bytes.
function parse(label) {
  const [num, unit] = label.split(" ");
  return Number(num) * 1024 ** BYTE_UNITS.indexOf(unit);
}

test("byte steps are 1, 2 or 5 × 10^j × 1024^k bytes", () => {
  for (const i of BYTE_INCRS) {
    let u = 0;
    while (i % 1024 ** (u + 1) === 0) u++;
    const m = i / 1024 ** u;
    assert.ok([1, 2, 5, 10, 20, 50, 100, 200, 500].includes(m), `step ${i}`);
  }
});

test("byte axis labels read true for sample ranges", () => {
  const cases = [
    // [max bytes, plot height px, the labels wanted]
    [4.1e6, 140, ["0 MiB", "1 MiB", "2 MiB", "3 MiB"]],
    [4.1e6, 60, ["0 MiB", "2 MiB"]],
    [2e6, 140, ["0 KiB", "500 KiB", "1000 KiB", "1500 KiB"]],
    [800, 140, ["0 B", "200 B", "400 B", "600 B", "800 B"]],
    [900, 140, ["0 B", "500 B"]],
    [0, 140, ["0 B", "1 B"]],
    [7.5 * 1024 ** 3, 140, ["0 GiB", "2 GiB", "4 GiB", "6 GiB"]],
    [600 * 1024 ** 2, 140, ["0 MiB", "200 MiB", "400 MiB", "600 MiB"]],
  ];
  for (const [max, px, want] of cases) {
    const { ticks, labels, incr } = byteAxis(max, px);
    assert.deepEqual(labels, want, `max ${max} on ${px} px`);
    labels.forEach((l, i) => assert.equal(parse(l), ticks[i], `label ${l} is tick ${ticks[i]}`));
    ticks.forEach((v, i) => assert.equal(v, i * incr, "evenly spaced"));
    assert.ok(ticks.length <= Math.floor(px / 30) + 1, `${ticks.length} ticks fit ${px} px`);
  }
});

test("every tick of every range prints exactly", () => {
  for (let max = 1; max < 2 ** 42; max = Math.ceil(max * 1.37)) {
    for (const px of [60, 140, 300]) {
      const { ticks, labels } = byteAxis(max, px);
      labels.forEach((l, i) => assert.equal(parse(l), ticks[i], `max ${max}, ${px} px: ${l}`));
      assert.equal(new Set(labels).size, labels.length, `distinct labels for max ${max}`);
    }
  }
});

test("translated units", () => {
  const ru = ["Б", "КиБ", "МиБ", "ГиБ", "ТиБ"];
  assert.deepEqual(byteAxis(4.1e6, 60, 30, ru).labels, ["0 МиБ", "2 МиБ"]);
});

test("the range ends on a tick", () => {
  assert.deepEqual(byteRange(4.1e6, 140), [0, 4 * 1024 ** 2]);
  assert.deepEqual(byteRange(0, 140), [0, 1]);
});

test("time labels follow the language", () => {
  const t = Date.UTC(2026, 11, 5, 14, 3, 9) / 1000;
  const ru = timeLabels([t, t + 3 * 86400], "ru");
  for (const l of ru) assert.doesNotMatch(l, /[A-Za-z]/, `Russian label ${l}`);
  assert.match(ru[0], /дек/);
  const en = timeLabels([t, t + 60], "en");
  for (const l of en) assert.match(l, /^\d\d:\d\d:\d\d$/);
});
