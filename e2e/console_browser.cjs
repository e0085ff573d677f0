// Browser test of the EventForge console, run by TestConsoleBrowser
// (console_test.go) with NODE_PATH=web/node_modules. playwright-core drives
// Debian's chromium (CHROMIUM, never a downloaded browser) against
// CONSOLE_URL; screenshots go to ARTIFACTS, and also to CONSOLE_SHOTS when
// that is set. The last line printed is "SUMMARY {json}" for the Go test.
"use strict";

const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const assert = require("node:assert/strict");
const { chromium } = require("playwright-core");

const BASE = process.env.CONSOLE_URL;
const ARTIFACTS = process.env.ARTIFACTS;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const TOKEN = process.env.OPS_TOKEN || "";
const SHOTS = process.env.CONSOLE_SHOTS || "";
const ORIGIN = new URL(BASE).origin;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const requests = [];
const foreign = [];
const shots = [];
const summary = { path_order: "", drills: {} };

function log(...args) {
  console.log(new Date().toISOString().slice(11, 23), ...args);
}

// shot takes a screenshot of the page, or of the element locator names.
async function shot(page, name, locator) {
  const file = path.join(ARTIFACTS, name + ".png");
  if (locator) await locator.screenshot({ path: file });
  else await page.screenshot({ path: file, fullPage: true });
  shots.push(file);
  if (SHOTS) fs.copyFileSync(file, path.join(SHOTS, name + ".png"));
  log("screenshot", file);
}

// setLang switches the page to lang with the toggle.
async function setLang(page, lang) {
  if ((await page.evaluate(() => document.documentElement.lang)) !== lang) await page.click("#lang-toggle");
  await page.waitForFunction((l) => document.documentElement.lang === l, lang);
}

// tabsReachable: every tab of the bar lies inside the viewport, visible,
// and opens its view when clicked (a bar that wraps, no hidden overflow).
async function tabsReachable(page, what) {
  const iw = await page.evaluate(() => window.innerWidth);
  const ids = await page.$$eval(".tabs .tab", (els) => els.map((e) => e.id));
  assert.ok(ids.length >= 4, `${what}: ${ids.length} tabs`);
  for (const id of ids) {
    const box = await page.locator("#" + id).boundingBox();
    assert.ok(box && box.x >= 0 && box.x + box.width <= iw + 0.5, `${what}: tab ${id} at ${JSON.stringify(box)} leaves the ${iw}px viewport`);
    await page.locator("#" + id).click({ trial: true });
  }
}

async function noHorizontalScroll(page, what) {
  const { sw, iw } = await page.evaluate(() => ({ sw: document.documentElement.scrollWidth, iw: window.innerWidth }));
  assert.ok(sw <= iw + 1, `${what}: the page is ${sw}px wide in a ${iw}px viewport`);
}

// focusByTab presses Tab until the element matching selector has focus:
// proof that it is reachable from the keyboard.
async function focusByTab(page, selector, max = 40) {
  for (let i = 0; i < max; i++) {
    if (await page.evaluate((s) => document.activeElement && document.activeElement.matches(s), selector)) return;
    await page.keyboard.press("Tab");
  }
  throw new Error(`${selector} never got the keyboard focus`);
}

async function counters(page) {
  const read = async (id) => Number(await page.locator(`[data-counter="${id}"] .value`).first().innerText());
  return {
    logical_events: await read("logical"),
    deliveries: await read("deliveries"),
    business_changes: await read("changes"),
    consumer_deliveries: await read("consumer-deliveries"),
    marks: await read("marks"),
    dead_lettered: await read("dlq"),
  };
}

async function deliveryPath(page) {
  await page.goto(BASE + "/ui/", { waitUntil: "load" });
  await page.locator("#send-order").waitFor();
  await shot(page, "01-delivery-path-empty");

  // Send the order from the keyboard.
  await focusByTab(page, "#send-order");
  await page.keyboard.press("Enter");
  await page.locator("#order-id").waitFor();
  if (TOKEN) {
    // The ops API answers 401: the page asks for the token.
    await page.locator("#ops-token").waitFor();
    await shot(page, "01b-token-prompt");
    await page.fill("#ops-token", TOKEN);
    await page.keyboard.press("Enter");
    await page.locator("#ops-token").waitFor({ state: "detached" });
  }
  const orderID = (await page.locator("#order-id").innerText()).trim();
  const eventID = (await page.locator("#event-id").innerText()).trim();
  assert.match(orderID, UUID);
  assert.match(eventID, UUID);
  log("order", orderID, "event", eventID);

  await page.waitForFunction(() => document.querySelectorAll('[data-step][data-state="done"]').length === 8, null, { timeout: 90_000 });
  const fact = async (step, name) => (await page.locator(`[data-step="${step}"] [data-fact="${name}"]`).first().innerText()).trim();
  assert.equal(await fact("api", "order_id"), orderID);
  assert.equal(await fact("api", "event_id"), eventID);
  assert.match(await fact("postgres", "commit_lsn"), /^[0-9A-F]+\/[0-9A-F]+$/);
  assert.match(await fact("cdc", "confirmed_lsn"), /^[0-9A-F]+\/[0-9A-F]+$/);
  assert.match(await fact("kafka", "partition"), /^\d+$/);
  assert.match(await fact("kafka", "offset"), /^\d+$/);
  assert.match(await fact("effect", "processed_at"), /^\d{4}-\d\d-\d\d /);
  assert.match(await fact("offset", "committed_offset"), /^\d+ ✓$/);
  for (const [tile, want] of [["order", "processed"], ["outbox", "written"], ["effect", "1 change"], ["offset", "committed"]]) {
    assert.equal((await page.locator(`[data-state-tile="${tile}"] dd`).innerText()).trim(), want, `state panel ${tile}`);
  }
  summary.path_order = orderID;

  // Step through: one sentence per step, from the keyboard.
  await page.click("#step-through");
  await page.locator("#step-sentence").waitFor();
  const sentences = new Set();
  for (let i = 0; i < 8; i++) {
    sentences.add(await page.locator("#step-sentence").innerText());
    if (i < 7) await page.click("#step-next");
  }
  assert.equal(sentences.size, 8, "eight distinct step sentences");
  await page.click("#step-through");
  await page.click("#read-all");
  assert.equal(await page.locator(".node .sentence").count(), 8, "Read all steps shows every sentence");
  await shot(page, "02-delivery-path-done");

  // Russian.
  await focusByTab(page, "#lang-toggle");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.documentElement.lang === "ru");
  assert.equal((await page.locator("#tab-path").innerText()).trim(), "Путь доставки");
  assert.equal((await page.locator('[data-state-tile="order"] dd').innerText()).trim(), "обработан");
  assert.equal((await page.locator('[data-state-tile="effect"] dd').innerText()).trim(), "1 изменение");
  await shot(page, "03-delivery-path-ru");
  await page.click("#lang-toggle");
  await page.waitForFunction(() => document.documentElement.lang === "en");
  assert.equal((await page.locator("#tab-path").innerText()).trim(), "Delivery path");

  // The glossary, from a term in a step's sentence.
  await page.locator('.node .sentence a.term[data-term="lsn"]').first().click();
  await page.waitForFunction(() => location.hash === "#/glossary/lsn");
  await page.locator("#term-lsn.current").waitFor();
  for (const term of ["lsn", "walsender", "slot", "mark", "failpoint", "outbox", "dlq"]) await page.locator("#term-" + term).waitFor();
  await shot(page, "14-glossary");
  await page.goBack();
  await page.locator("#send-order").waitFor();

  // Phone width.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(300);
  await noHorizontalScroll(page, "delivery path at phone width");
  await tabsReachable(page, "390 px");
  await shot(page, "04-delivery-path-phone");
  await page.setViewportSize({ width: 1280, height: 900 });
}

const DRILLS = [
  { name: "relay-crash", mode: "run", want: { logical_events: 1, deliveries: 2, business_changes: 1 } },
  { name: "consumer-crash", mode: "step", want: { logical_events: 1, deliveries: 1, business_changes: 1, consumer_deliveries: 2 } },
  { name: "concurrent-duplicate", mode: "run", want: { logical_events: 1, deliveries: 1, business_changes: 1, marks: 1, consumer_deliveries: 2 } },
  { name: "dlq-replay", mode: "run", want: { logical_events: 1, deliveries: 2, business_changes: 1, dead_lettered: 1 } },
];

async function drills(page) {
  await page.goto(BASE + "/ui/#/drills", { waitUntil: "load" });
  await page.locator('[data-drill="relay-crash"] input').waitFor();
  // The expected line speaks the counters' words.
  const expect = (await page.locator('[data-expect="concurrent-duplicate"]').innerText()).trim();
  for (const part of ["Records in Kafka: 1", "Deliveries to the consumer: 2", "processed_events marks: 1", "Business changes: 1"]) {
    assert.ok(expect.includes(part), `concurrent-duplicate expects "${expect}", without "${part}"`);
  }
  // The glossary from the drills' intro.
  await page.locator('.intro a.term[data-term="failpoint"]').click();
  await page.locator("#term-failpoint.current").waitFor();
  await page.goBack();
  await page.locator('[data-drill="relay-crash"] input').waitFor();
  await shot(page, "05-drills-picker");
  for (const d of DRILLS) {
    log("drill", d.name, d.mode);
    await page.locator(`[data-drill="${d.name}"] input`).check();
    await page.click(d.mode === "step" ? "#step-drill" : "#run-drill");
    await page.locator(`[data-run-drill="${d.name}"]`).waitFor();
    const deadline = Date.now() + 240_000;
    let pauses = 0;
    const waits = new Set();
    for (;;) {
      for (const w of await page.$$eval("[data-waiting-for]", (els) => els.map((e) => e.getAttribute("data-waiting-for")))) {
        if (!waits.has(w) && w === "session_timeout") await shot(page, `06-drill-${d.name}-waiting`);
        waits.add(w);
      }
      const state = await page.locator(`[data-run-drill="${d.name}"]`).getAttribute("data-run-state");
      if (state === "done") break;
      if (state === "failed") throw new Error(`drill ${d.name} failed: ${await page.locator("#run-state").innerText()}`);
      if (state === "paused") {
        pauses++;
        if (pauses === 2) await shot(page, `06-drill-${d.name}-paused`);
        const pending = await page.locator(`[data-run-drill="${d.name}"] [data-stage][data-state="pending"]`).count();
        await page.click("#continue-drill");
        // The next stage starts (it may finish and pause again before the
        // next poll, so wait for a stage to leave "pending").
        await page.waitForFunction(
          ([n, before]) => {
            const el = document.querySelector(`[data-run-drill="${n}"]`);
            if (!el) return false;
            const st = el.getAttribute("data-run-state");
            return st === "done" || st === "failed" || el.querySelectorAll('[data-stage][data-state="pending"]').length < before;
          },
          [d.name, pending],
          { timeout: 180_000 },
        );
      }
      if (Date.now() > deadline) throw new Error(`drill ${d.name} still ${state} after 240 s`);
      await page.waitForTimeout(300);
    }
    if (d.mode === "step") assert.ok(pauses >= 3, `step mode paused ${pauses} times`);
    if (d.name === "consumer-crash") assert.ok(waits.has("session_timeout"), `consumer-crash never said it waits for the session timeout (saw ${[...waits]})`);
    // Done: no stale error, every counter as expected, and no failpoint
    // left on a process.
    assert.equal(await page.locator(".drill-main .error").count(), 0, `drill ${d.name}: an error stays after Done`);
    assert.equal(await page.locator(".counter.off").count(), 0, `drill ${d.name}: a counter differs from its expectation`);
    await page.waitForFunction(() => document.querySelectorAll(".procs .fp").length === 0, null, { timeout: 30_000 });
    const got = await counters(page);
    for (const [k, v] of Object.entries(d.want)) assert.equal(got[k], v, `drill ${d.name}: counter ${k}`);
    const orderID = (await page.locator("#drill-order-id").innerText()).trim();
    assert.match(orderID, UUID);
    summary.drills[d.name] = { order_id: orderID, counters: got };
    log("drill", d.name, "order", orderID, JSON.stringify(got));
    await shot(page, `07-drill-${d.name}`);
  }
  await setLang(page, "ru");
  assert.match(await page.locator('[data-component="cdc"]').innerText(), /убит сигналом SIGKILL|завершился с кодом/);
  await shot(page, "08-drills-ru");
  await setLang(page, "en");
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(300);
  await noHorizontalScroll(page, "drills at phone width");
  await tabsReachable(page, "drills at 390 px");
  await shot(page, "09-drills-phone");
  await page.setViewportSize({ width: 1280, height: 900 });
}

// axis reads the labels a chart's axis drew (data-axis-<scale>).
async function axis(page, chart, scale) {
  const v = await page.locator(`[data-chart="${chart}"] .uplot`).getAttribute("data-axis-" + scale);
  return (v || "").split("|").filter(Boolean);
}

async function operations(page) {
  await page.goto(BASE + "/ui/#/ops", { waitUntil: "load" });
  const dlqOrder = summary.drills["dlq-replay"].order_id;
  const row = page.locator(`#dlq-table tr[data-order-id="${dlqOrder}"]`);
  await row.first().waitFor({ timeout: 30_000 });
  // The drill replayed its dead letter: the row says so, without a Replay
  // button.
  await page.waitForFunction((id) => {
    const rows = [...document.querySelectorAll(`#dlq-table tr[data-order-id="${id}"]`)];
    return rows.length > 0 && rows.every((r) => r.getAttribute("data-state") === "replayed");
  }, dlqOrder, { timeout: 30_000 });
  assert.equal(await row.locator("button.replay").count(), 0, "a replayed record offers no Replay button");
  assert.match(await page.locator("#dlq-counts").innerText(), /\b1 record held\b|records held/);
  assert.doesNotMatch(await page.locator("#dlq-counts").innerText(), /\b1 records\b/);
  // Charts need a few samples.
  await page.waitForFunction(() => {
    const el = document.querySelector('[data-now="slot-lag-bytes"]');
    return el && el.textContent !== "—";
  }, null, { timeout: 30_000 });
  await page.waitForFunction(() => document.querySelectorAll(".uplot").length >= 8, null, { timeout: 30_000 });
  await page.waitForTimeout(5000); // a few more points on the charts
  // With no pending record left, the DLQ card's "oldest pending" reads
  // "—", not the age the last pending record had.
  await page.waitForFunction(() => {
    const pending = document.querySelector('[data-now="dlq-0"]');
    return pending && pending.textContent === "0";
  }, null, { timeout: 30_000 });
  assert.equal(await page.locator('[data-now="dlq-2"]').innerText(), "—", "oldest pending age with no pending record");
  // The byte axes read true; the slot charts say what they count and draw
  // the shipped alert thresholds.
  for (const chart of ["slot-lag-bytes", "retained-wal"]) {
    const labels = await axis(page, chart, "y");
    assert.ok(labels.length >= 2, `${chart}: y labels ${labels}`);
    const unit = labels[1].split(" ")[1];
    const step = Number(labels[1].split(" ")[0]);
    labels.forEach((l, i) => assert.equal(l, i * step + " " + unit, `${chart}: y labels ${labels} are not evenly spaced in ${unit}`));
    assert.ok((await page.locator(`[data-chart="${chart}"] .chart-note`).innerText()).length > 40, `${chart} says what it counts`);
  }
  assert.equal(await page.locator('[data-chart="slot-lag-bytes"] [data-alert="EventForgeSlotLagHigh"]').getAttribute("data-alert-value"), String(512 * 1024 * 1024));
  assert.equal(await page.locator('[data-chart="retained-wal"] [data-alert="EventForgeRetainedWALHigh"]').count(), 1);
  assert.match(await page.locator('[data-chart="slot-lag-bytes"] .chart-note').innerText(), /other databases/);
  await shot(page, "10-operations");
  await shot(page, "11-dlq", page.locator("section.dlq"));

  // Replaying the replayed event once more (the API still takes it) leaves
  // one business change.
  const auth = () => ({ Authorization: "Bearer " + sessionStorage.getItem("eventforge.opsToken") });
  await page.evaluate(async ([id, h]) => {
    const d = await (await fetch("/api/ops/dlq", { headers: h })).json();
    const r = d.entries.find((e) => e.order_id === id);
    const resp = await fetch("/api/ops/dlq/replay", { method: "POST", headers: { ...h, "Content-Type": "application/json" }, body: JSON.stringify({ partition: r.partition, offset: r.offset }) });
    if (!resp.ok) throw new Error("replay: " + resp.status);
  }, [dlqOrder, await page.evaluate(auth)]);
  await page.waitForFunction(async ([id, h]) => {
    const tr = await (await fetch("/api/ops/orders/" + id, { headers: h })).json();
    return tr.records.length >= 3 && tr.state.offset === "committed";
  }, [dlqOrder, await page.evaluate(auth)], { timeout: 60_000, polling: 500 });
  const after = await page.evaluate(async ([id, h]) => (await fetch("/api/ops/orders/" + id, { headers: h })).json(), [dlqOrder, await page.evaluate(auth)]);
  assert.equal(after.state.changes, 1, "after the second replay was consumed: still one change");

  // Russian: no English on the time axis or the byte axes.
  await setLang(page, "ru");
  await page.waitForFunction(() => (document.querySelector('[data-chart="slot-lag-bytes"] .uplot') || {}).dataset?.axisX?.length > 0);
  await page.waitForTimeout(500);
  for (const chart of ["slot-lag-bytes", "retained-wal", "dlq"]) {
    for (const l of [...(await axis(page, chart, "x")), ...(await axis(page, chart, "y"))]) {
      assert.doesNotMatch(l, /[A-Za-z]/, `Russian ${chart} axis label "${l}"`);
    }
  }
  assert.match((await axis(page, "slot-lag-bytes", "y"))[1] || "", /^\d+ (Б|КиБ|МиБ|ГиБ)$/);
  await shot(page, "12-operations-ru");
  await shot(page, "12b-dlq-ru", page.locator("section.dlq"));
  await setLang(page, "en");
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(500);
  await noHorizontalScroll(page, "operations at phone width");
  await tabsReachable(page, "operations at 390 px");
  await shot(page, "13-operations-phone");
  await shot(page, "13b-dlq-phone", page.locator("section.dlq"));
  await page.click("#tab-glossary");
  await page.locator("#glossary").waitFor();
  await shot(page, "15-glossary-phone");
}

async function main() {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  if (SHOTS) fs.mkdirSync(SHOTS, { recursive: true });
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "eventforge-chromium-"));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    viewport: { width: 1280, height: 900 },
    locale: "en-US",
  });
  context.on("request", (req) => {
    const url = req.url();
    requests.push(url);
    if (!url.startsWith("data:") && new URL(url).origin !== ORIGIN) foreign.push(url);
  });
  const page = context.pages()[0] || (await context.newPage());
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") pageErrors.push("console: " + m.text());
  });
  try {
    await deliveryPath(page);
    await drills(page);
    await operations(page);
    // 404s answer the views' probes; 401s are expected before the token is
    // entered. Anything else is a bug.
    const unexpected = pageErrors.filter((e) => !e.includes("status of 404") && !(TOKEN && e.includes("status of 401")));
    assert.deepEqual(unexpected, [], "no script errors on the page");
  } catch (e) {
    try {
      await shot(page, "99-failure");
    } catch {
      // the browser may be gone
    }
    throw e;
  } finally {
    await context.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
  console.log("SUMMARY " + JSON.stringify({ ...summary, requests: requests.length, foreign, screenshots: shots }));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
