// The Russian bundle is complete and Russian: `make web-test` (node --test).
import { test } from "node:test";
import assert from "node:assert/strict";
import en from "../src/i18n/en.js";
import ru from "../src/i18n/ru.js";
import { translator } from "../src/i18n.js";

// ALLOWED are the Latin words a Russian text may keep: proper nouns and
// the terms of the trade the page writes in Latin letters in both
// languages (the glossary explains them).
const ALLOWED = new Set([
  "Kafka", "PostgreSQL", "EventForge", "LSN", "WAL", "CDC", "DLQ", "API", "ID", "PID", "Bearer",
  "outbox", "Outbox", "offset", "failpoint", "Failpoint", "walsender", "fulfillment", "English",
]);

const PLURAL = /\.(zero|one|two|few|many|other)$/;

// prose drops what is not prose: `code`, the link targets of [[term|text]]
// and {placeholders}.
function prose(s) {
  return s.replace(/`[^`]*`/g, " ").replace(/\[\[[\w-]+\|/g, "").replace(/\]\]/g, "").replace(/\{\w+\}/g, " ");
}

// englishWords returns the Latin words of s that are neither allowed nor
// identifiers (processed_events, cdc.after_ack…, 0/1A2B3C8).
export function englishWords(s) {
  return prose(s)
    .split(/[\s,;:()«»“”"!?·—–→+]+/)
    .map((w) => w.replace(/^[.'-]+|[.'-]+$/g, ""))
    .filter((w) => /[A-Za-z]/.test(w) && !/[_.=/<>0-9@]/.test(w))
    .filter((w) => !w.split("-").every((part) => ALLOWED.has(part) || /^[А-Яа-яЁё]+$/.test(part)));
}

// problems lists what is wrong with a Russian bundle against the English
// one: missing or extra keys, missing plural forms, English left in.
export function problems(enDict, ruDict) {
  const out = [];
  const bases = (d) => new Set(Object.keys(d).map((k) => k.replace(PLURAL, "")));
  const enBases = bases(enDict);
  const ruBases = bases(ruDict);
  for (const k of enBases) if (!ruBases.has(k)) out.push("missing in ru: " + k);
  for (const k of ruBases) if (!enBases.has(k)) out.push("not in en: " + k);
  for (const k of enBases) {
    if (!Object.keys(enDict).some((x) => x.startsWith(k + ".") && PLURAL.test(x))) continue;
    for (const form of ["one", "few", "many", "other"]) if (!(k + "." + form in ruDict)) out.push(`plural ${k}: ru lacks .${form}`);
  }
  for (const [k, v] of Object.entries(ruDict)) {
    const words = englishWords(v);
    if (words.length === 0) continue;
    const what = enDict[k] === v ? "the English text" : "English words " + JSON.stringify(words) + " in";
    out.push(`ru ${k}: ${what} ${JSON.stringify(v)}`);
  }
  return out;
}

test("the Russian bundle has every key and no English", () => {
  assert.deepEqual(problems(en, ru), []);
});

test("the check catches English left in a Russian bundle", () => {
  const bad = { ...ru, "ops.replay": en["ops.replay"], "ops.refresh": "Обновить now" };
  delete bad["ops.col.age"];
  const found = problems(en, bad);
  assert.ok(found.some((p) => p.includes("ops.replay")), found.join("\n"));
  assert.ok(found.some((p) => p.includes("ops.refresh")), found.join("\n"));
  assert.ok(found.some((p) => p === "missing in ru: ops.col.age"), found.join("\n"));
});

test("English has the plural forms it uses", () => {
  for (const k of Object.keys(en).filter((x) => PLURAL.test(x))) {
    const b = k.replace(PLURAL, "");
    assert.ok(b + ".one" in en && b + ".other" in en, b);
  }
});

test("plural forms follow the language", () => {
  const t = translator("en");
  assert.equal(t.n("state.effect", 1), "1 change");
  assert.equal(t.n("state.effect", 2), "2 changes");
  assert.equal(t.n("ops.dlqHeld", 1, { topic: "x.dlq" }), "1 record held in x.dlq");
  const r = translator("ru");
  assert.equal(r.n("state.effect", 1), "1 изменение");
  assert.equal(r.n("state.effect", 3), "3 изменения");
  assert.equal(r.n("state.effect", 5), "5 изменений");
  assert.equal(r.n("state.effect", 21), "21 изменение");
});
