import { useState } from "preact/hooks";
import { useT } from "./i18n.js";
import { api, NotFound } from "./api.js";
import { guard, usePoll, fmtTime } from "./util.js";

function Counters({ counters, drill }) {
  const t = useT();
  if (!counters) return null;
  const big = [
    ["logical", "drills.logical", counters.logical_events],
    ["deliveries", "drills.deliveries", counters.deliveries],
    ["changes", "drills.changes", counters.business_changes],
  ];
  const small = [
    ["consumer-deliveries", "drills.consumerDeliveries", counters.consumer_deliveries],
    ["marks", "drills.marks", counters.marks],
    ["dlq", "drills.dlq", counters.dead_lettered],
  ];
  return (
    <section class="panel counters" aria-labelledby="counters-title" data-drill={drill}>
      <h2 id="counters-title">{t("drills.counters")}</h2>
      <div class="big-counters">
        {big.map(([id, label, v]) => (
          <div class="counter" data-counter={id}>
            <div class="value">{v}</div>
            <div class="label">{t(label)}</div>
          </div>
        ))}
      </div>
      <dl class="small-counters">
        {small.map(([id, label, v]) => (
          <div data-counter={id}>
            <dt>{t(label)}</dt>
            <dd>{v}</dd>
          </div>
        ))}
      </dl>
    </section>
  );
}

function factText(v, t) {
  if (v === null || v === undefined) return "—";
  if (v === true) return t("common.yes");
  if (v === false) return t("common.no");
  if (Array.isArray(v)) {
    return v.map((r) => (r && typeof r === "object" && "partition" in r ? "p" + r.partition + "@" + r.offset + (r.replay ? " (replay)" : "") : JSON.stringify(r))).join(", ") || "—";
  }
  if (typeof v === "object") return Object.entries(v).map(([k, x]) => k + ": " + factText(x, t)).join(", ");
  return String(v);
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
                {t("drills.lastExit")}: {c.last_exit} {c.last_exit_at ? "· " + fmtTime(c.last_exit_at) : ""}
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
        if (r) setRun(r);
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
    try {
      const r = await guard(auth, api.continueDrill(run.id));
      if (r) setRun(r);
    } catch (e) {
      setError(String(e.message || e));
    }
  };

  if (catalog === false) {
    return (
      <div class="view">
        <p class="notice" id="drills-off">{t("drills.off")}</p>
      </div>
    );
  }
  const drills = catalog || [];
  const shown = run ? drills.find((d) => d.name === run.drill) : drills.find((d) => d.name === selected);
  return (
    <div class="view">
      <p class="intro">{t("drills.intro")}</p>
      {!supervised && <p class="notice">{t("drills.unsupervised")}</p>}
      <div class="drills-layout">
        <fieldset class="picker" disabled={active}>
          <legend>{t("drills.pick")}</legend>
          {drills.map((d) => (
            <label class={"choice" + (selected === d.name ? " chosen" : "")} data-drill={d.name}>
              <input type="radio" name="drill" value={d.name} checked={selected === d.name} onChange={() => setSelected(d.name)} />
              <span>
                <strong>{t("drill." + d.name + ".title")}</strong>
                <span class="muted">{t("drill." + d.name + ".text")}</span>
                <span class="expect">
                  {t("drills.expected")}: {t("drill." + d.name + ".expect")}
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
                    <p>{t("drill." + run.drill + "." + s.id)}</p>
                    {Object.keys(s.facts).length > 0 && (
                      <dl class="facts">
                        {Object.entries(s.facts).map(([k, v]) => (
                          <div>
                            <dt>{t("dfact." + k) === "dfact." + k ? k.replace(/_/g, " ") : t("dfact." + k)}</dt>
                            <dd class="mono">{factText(v, t)}</dd>
                          </div>
                        ))}
                      </dl>
                    )}
                  </li>
                ))}
              </ol>
              <Counters counters={run.counters} drill={run.drill} />
            </div>
          )}
          {!run && shown && (
            <ol class="stages preview">
              {shown.stages.map((s) => (
                <li class="stage pending" data-stage={s}>
                  <span class="pill wait">{t("common.pending")}</span>
                  <p>{t("drill." + shown.name + "." + s)}</p>
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
