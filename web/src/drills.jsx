import { useEffect, useState } from "preact/hooks";
import { useT } from "./i18n.js";
import { api, NotFound } from "./api.js";
import { guard, usePoll, fmtTime } from "./util.js";
import { Rich } from "./glossary.jsx";

// COUNTERS are the drill counters in the order the page shows them: the
// first three big; the expected line says the same words.
const COUNTERS = [
  ["logical", "drills.logical", "logical_events"],
  ["deliveries", "drills.deliveries", "deliveries"],
  ["changes", "drills.changes", "business_changes"],
  ["consumer-deliveries", "drills.consumerDeliveries", "consumer_deliveries"],
  ["marks", "drills.marks", "marks"],
  ["dlq", "drills.dlq", "dead_lettered"],
];

// expectedLine is a drill's expectation in the counters' own words.
function expectedLine(expect, t) {
  if (!expect) return "";
  return COUNTERS.filter(([, , k], i) => i < 3 || expect[k] > 0)
    .map(([, label, k]) => t(label) + ": " + expect[k])
    .join(" · ");
}

function Counters({ counters, expect, drill }) {
  const t = useT();
  if (!counters) return null;
  const tile = ([id, label, k], big) => {
    const want = expect ? expect[k] : undefined;
    const off = want !== undefined && counters[k] !== want;
    return (
      <div class={"counter" + (big ? "" : " small") + (off ? " off" : "")} data-counter={id}>
        <div class="value">{counters[k]}</div>
        <div class="label">{t(label)}</div>
        {want !== undefined && <div class="expect-value">{(off ? "✗ " : "✓ ") + t("drills.expectedValue", { n: want })}</div>}
      </div>
    );
  };
  return (
    <section class="panel counters" aria-labelledby="counters-title" data-drill={drill}>
      <h2 id="counters-title">{t("drills.counters")}</h2>
      <div class="big-counters">{COUNTERS.slice(0, 3).map((c) => tile(c, true))}</div>
      <div class="big-counters small-row">{COUNTERS.slice(3).map((c) => tile(c, false))}</div>
    </section>
  );
}

// Waiting says what a running stage waits for and for how long.
function Waiting({ stage }) {
  const t = useT();
  const [, setTick] = useState(0);
  useEffect(() => {
    const id = setInterval(() => setTick((n) => n + 1), 1000);
    return () => clearInterval(id);
  }, []);
  const s = Math.max(0, Math.round((Date.now() - new Date(stage.waiting_since).getTime()) / 1000));
  return (
    <p class="waiting" data-waiting-for={stage.waiting_for} aria-live="polite">
      <Rich text={t("drills.waitingFor", { what: t("wait." + stage.waiting_for), s })} />
    </p>
  );
}

function factText(v, t) {
  if (v === null || v === undefined) return "—";
  if (v === true) return t("common.yes");
  if (v === false) return t("common.no");
  if (Array.isArray(v)) {
    return v.map((r) => (r && typeof r === "object" && "partition" in r ? "p" + r.partition + "@" + r.offset + (r.replay ? " (" + t("drills.replayTag") + ")" : "") : JSON.stringify(r))).join(", ") || "—";
  }
  if (typeof v === "object") return Object.entries(v).map(([k, x]) => k + ": " + factText(x, t)).join(", ");
  return String(v);
}

// exitText says how a process ended in t's words.
function exitText(c, t) {
  if (c.last_exit_signal) return t("exit.signal", { signal: c.last_exit_signal });
  if (c.last_exit_code >= 0) return t("exit.status", { code: c.last_exit_code });
  return c.last_exit;
}

function Processes({ components }) {
  const t = useT();
  if (!components || components.length === 0) return null;
  return (
    <section class="panel" aria-labelledby="procs-title">
      <h2 id="procs-title">{t("drills.processes")}</h2>
      <ul class="procs">
        {components.map((c) => (
          <li class={c.running ? "proc up" : "proc down"} data-component={c.name}>
            <span class="dot" aria-hidden="true" />
            <strong>{c.name}</strong>
            <span>{c.running ? t("drills.pid") + " " + c.pid : t("drills.notRunning")}</span>
            <span class="muted">
              {t("drills.starts")}: {c.starts}
            </span>
            {c.failpoints && <code class="fp">{c.failpoints}</code>}
            {c.last_exit && (
              <span class="muted">
                {t("drills.lastExit")}: {exitText(c, t)} {c.last_exit_at ? "· " + fmtTime(c.last_exit_at) : ""}
              </span>
            )}
          </li>
        ))}
      </ul>
    </section>
  );
}

export function Drills({ auth }) {
  const t = useT();
  const [catalog, setCatalog] = useState(null); // null: loading; false: drills off
  const [supervised, setSupervised] = useState(true);
  const [selected, setSelected] = useState("relay-crash");
  const [run, setRun] = useState(null);
  const [components, setComponents] = useState([]);
  const [error, setError] = useState("");

  usePoll(
    async () => {
      try {
        const d = await guard(auth, api.drills());
        if (!d) return;
        setCatalog(d.drills);
        setSupervised(d.supervised);
        if (d.active && (!run || run.id !== d.active.id)) setRun(d.active);
      } catch (e) {
        if (e instanceof NotFound) setCatalog(false);
        else setError(String(e.message || e));
      }
    },
    5000,
    [auth.epoch],
  );
  usePoll(
    async () => {
      try {
        const o = await guard(auth, api.overview());
        if (o) setComponents(o.components);
      } catch {
        // shown by the drills poll
      }
    },
    1500,
    [auth.epoch],
  );
  const active = run && (run.state === "running" || run.state === "paused");
  usePoll(
    async () => {
      if (!run) return;
      try {
        const r = await guard(auth, api.drillRun(run.id));
        if (r) {
          setRun(r);
          if (r.state === "done") setError("");
        }
      } catch (e) {
        setError(String(e.message || e));
      }
    },
    700,
    [run && run.id, auth.epoch],
    !!active,
  );

  const start = async (mode) => {
    setError("");
    try {
      const r = await guard(auth, api.startDrill(selected, mode));
      if (r) setRun(r);
    } catch (e) {
      setError(String(e.message || e));
    }
  };
  const cont = async () => {
    setError("");
    try {
      const r = await guard(auth, api.continueDrill(run.id));
      if (r) setRun(r);
    } catch (e) {
      // The run moved on meanwhile (409: not paused): the next poll shows
      // where it is; any other error is shown.
      if (!String(e.message || e).startsWith("409")) setError(String(e.message || e));
    }
  };

  if (catalog === false) {
    return (
      <div class="view">
        <p class="notice" id="drills-off">
          <Rich text={t("drills.off")} />
        </p>
      </div>
    );
  }
  const drills = catalog || [];
  const shown = run ? drills.find((d) => d.name === run.drill) : drills.find((d) => d.name === selected);
  const runDrill = run && drills.find((d) => d.name === run.drill);
  return (
    <div class="view">
      <p class="intro">
        <Rich text={t("drills.intro")} />
      </p>
      {!supervised && (
        <p class="notice">
          <Rich text={t("drills.unsupervised")} />
        </p>
      )}
      <div class="drills-layout">
        <fieldset class="picker" disabled={active}>
          <legend>{t("drills.pick")}</legend>
          {drills.map((d) => (
            <label class={"choice" + (selected === d.name ? " chosen" : "")} data-drill={d.name}>
              <input type="radio" name="drill" value={d.name} checked={selected === d.name} onChange={() => setSelected(d.name)} />
              <span>
                <strong>{t("drill." + d.name + ".title")}</strong>
                <span class="muted">
                  <Rich text={t("drill." + d.name + ".text")} />
                </span>
                <span class="expect" data-expect={d.name}>
                  {t("drills.expected")}: {expectedLine(d.expect, t)}
                </span>
              </span>
            </label>
          ))}
        </fieldset>
        <div class="drill-main">
          <div class="toolbar">
            <button type="button" class="primary" id="run-drill" onClick={() => start("run")} disabled={active || !supervised}>
              {t("drills.run")}
            </button>
            <button type="button" id="step-drill" onClick={() => start("step")} disabled={active || !supervised}>
              {t("drills.step")}
            </button>
            {run && run.state === "paused" && (
              <button type="button" class="primary" id="continue-drill" onClick={cont}>
                {t("drills.continue")} →
              </button>
            )}
          </div>
          {error && <p class="error" role="alert">{t("common.error")}: {error}</p>}
          {run && (
            <div class="run" data-run-state={run.state} data-run-drill={run.drill}>
              <p class={"run-state " + run.state} aria-live="polite" id="run-state">
                {t("drills.state." + run.state, { error: run.error || "" })}
              </p>
              {run.order_id && (
                <p class="ids-inline">
                  <span class="muted">{t("path.orderId")}</span> <code id="drill-order-id">{run.order_id}</code>{" "}
                  <span class="muted">{t("path.eventId")}</span> <code>{run.event_id}</code>
                </p>
              )}
              <ol class="stages">
                {run.stages.map((s) => (
                  <li class={"stage " + s.state} data-stage={s.id} data-state={s.state}>
                    <span class={"pill " + (s.state === "done" ? "ok" : s.state === "failed" ? "bad" : s.state === "running" ? "run" : "wait")}>
                      {t("common." + s.state)}
                    </span>
                    <p>
                      <Rich text={t("drill." + run.drill + "." + s.id)} />
                    </p>
                    {s.state === "running" && s.waiting_for && <Waiting stage={s} />}
                    {Object.keys(s.facts).length > 0 && (
                      <dl class="facts">
                        {Object.entries(s.facts).map(([k, v]) => (
                          <div>
                            <dt>{t("dfact." + k) === "dfact." + k ? k.replace(/_/g, " ") : t("dfact." + k)}</dt>
                            <dd class="mono">{k === "last_exit" && v && typeof v === "object" ? exitText(v, t) : factText(v, t)}</dd>
                          </div>
                        ))}
                      </dl>
                    )}
                  </li>
                ))}
              </ol>
              {run.disarmed && run.disarmed.length > 0 && run.state !== "running" && (
                <p class="muted" id="drill-disarmed">
                  {t("drills.disarmed", { list: run.disarmed.join(", ") })}
                </p>
              )}
              <Counters counters={run.counters} expect={runDrill && runDrill.expect} drill={run.drill} />
            </div>
          )}
          {!run && shown && (
            <ol class="stages preview">
              {shown.stages.map((s) => (
                <li class="stage pending" data-stage={s}>
                  <span class="pill wait">{t("common.pending")}</span>
                  <p>
                    <Rich text={t("drill." + shown.name + "." + s)} />
                  </p>
                </li>
              ))}
            </ol>
          )}
          <Processes components={components} />
        </div>
      </div>
    </div>
  );
}
