// Browser test of the EventForge console, run by TestConsoleBrowser
// (console_test.go) with NODE_PATH=web/node_modules. playwright-core drives
// Debian's chromium (CHROMIUM, never a downloaded browser) against
// CONSOLE_URL; screenshots go to ARTIFACTS. The last line printed is
// "SUMMARY {json}" for the Go test.
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
const ORIGIN = new URL(BASE).origin;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const requests = [];
const foreign = [];
const shots = [];
const summary = { path_order: "", drills: {} };

function log(...args) {
  console.log(new Date().toISOString().slice(11, 23), ...args);
}

async function shot(page, name) {
  const file = path.join(ARTIFACTS, name + ".png");
  await page.screenshot({ path: file, fullPage: true });
  shots.push(file);
  log("screenshot", file);
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
  const read = async (id) => Number(await page.locator(`[data-counter="${id}"] .value, [data-counter="${id}"] dd`).first().innerText());
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
  await shot(page, "03-delivery-path-ru");
  await page.click("#lang-toggle");
  await page.waitForFunction(() => document.documentElement.lang === "en");
  assert.equal((await page.locator("#tab-path").innerText()).trim(), "Delivery path");

  // Phone width.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(300);
  await noHorizontalScroll(page, "delivery path at phone width");
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
  await shot(page, "05-drills-picker");
  for (const d of DRILLS) {
    log("drill", d.name, d.mode);
    await page.locator(`[data-drill="${d.name}"] input`).check();
    await page.click(d.mode === "step" ? "#step-drill" : "#run-drill");
    await page.locator(`[data-run-drill="${d.name}"]`).waitFor();
    const deadline = Date.now() + 240_000;
    let pauses = 0;
    for (;;) {
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
    const got = await counters(page);
    for (const [k, v] of Object.entries(d.want)) assert.equal(got[k], v, `drill ${d.name}: counter ${k}`);
    const orderID = (await page.locator("#drill-order-id").innerText()).trim();
    assert.match(orderID, UUID);
    summary.drills[d.name] = { order_id: orderID, counters: got };
    log("drill", d.name, "order", orderID, JSON.stringify(got));
    await shot(page, `07-drill-${d.name}`);
  }
  await page.click("#lang-toggle");
  await page.waitForFunction(() => document.documentElement.lang === "ru");
  await shot(page, "08-drills-ru");
  await page.click("#lang-toggle");
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(300);
  await noHorizontalScroll(page, "drills at phone width");
  await shot(page, "09-drills-phone");
  await page.setViewportSize({ width: 1280, height: 900 });
}

async function operations(page) {
  await page.goto(BASE + "/ui/#/ops", { waitUntil: "load" });
  const dlqOrder = summary.drills["dlq-replay"].order_id;
  const row = page.locator(`#dlq-table tr[data-order-id="${dlqOrder}"]`);
  await row.waitFor({ timeout: 30_000 });
  // Charts need a few samples.
  await page.waitForFunction(() => {
    const el = document.querySelector('[data-now="slot-lag-bytes"]');
    return el && el.textContent !== "—";
  }, null, { timeout: 30_000 });
  await page.waitForFunction(() => document.querySelectorAll(".uplot").length >= 8, null, { timeout: 30_000 });
  await page.waitForTimeout(5000); // a few more points on the charts
  await shot(page, "10-operations");

  // Replay the dead-lettered event once more from the table: the event is
  // already applied, so the business effect stays at one change.
  await row.locator("button.replay").first().click();
  await row.locator("button.replay", { hasText: "Replayed" }).first().waitFor({ timeout: 30_000 });
  const trace = await page.evaluate(async (id) => (await fetch("/api/ops/orders/" + id, { headers: { Authorization: "Bearer " + sessionStorage.getItem("eventforge.opsToken") } })).json(), dlqOrder);
  assert.equal(trace.state.changes, 1, "replay leaves one change");
  await page.waitForFunction(async (id) => {
    const tr = await (await fetch("/api/ops/orders/" + id, { headers: { Authorization: "Bearer " + sessionStorage.getItem("eventforge.opsToken") } })).json();
    return tr.records.length >= 3 && tr.state.offset === "committed";
  }, dlqOrder, { timeout: 60_000, polling: 500 });
  const after = await page.evaluate(async (id) => (await fetch("/api/ops/orders/" + id, { headers: { Authorization: "Bearer " + sessionStorage.getItem("eventforge.opsToken") } })).json(), dlqOrder);
  assert.equal(after.state.changes, 1, "after the second replay was consumed: still one change");
  await shot(page, "11-operations-replayed");

  await page.click("#lang-toggle");
  await page.waitForFunction(() => document.documentElement.lang === "ru");
  await shot(page, "12-operations-ru");
  await page.click("#lang-toggle");
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(500);
  await noHorizontalScroll(page, "operations at phone width");
  await shot(page, "13-operations-phone");
}

async function main() {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
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
