import { useState } from "preact/hooks";
import { useT } from "./i18n.js";
import { api } from "./api.js";
import { fmtTime, guard, usePoll } from "./util.js";
import { Rich } from "./glossary.jsx";

const STEP_IDS = ["api", "postgres", "slot", "cdc", "kafka", "member", "effect", "offset"];

// deriveSteps turns a trace (facts from durable state) into the diagram's
// steps: whether each is done and the facts that prove it.
export function deriveSteps(tr, t = (k) => k) {
  const has = (x) => x !== null && x !== undefined && x !== "";
  const recs = (tr && tr.records) || [];
  const first = recs[0];
  const cons = (tr && tr.consumers) || [];
  const multi = cons.length > 1;
  const per = (key, c) => (multi ? [key, c.name] : [key]);
  const s = {};
  s.api = {
    done: !!(tr && tr.order),
    facts: tr && tr.order ? [[["fact.order_id"], tr.order_id, "id"], [["fact.event_id"], tr.event_id || "", "id"]] : [],
  };
  s.postgres = {
    done: !!(tr && tr.outbox),
    facts: tr && tr.outbox ? [[["fact.status"], t("state.order." + tr.order.status)], [["fact.commit_lsn"], tr.commit_lsn, "mono"], [["fact.created_at"], fmtTime(tr.outbox.created_at)]] : [],
  };
  s.slot = {
    done: recs.length > 0,
    facts: tr && tr.outbox ? [[["fact.slot"], tr.slot.name, "mono"], [["fact.reader"], has(tr.slot.active_pid) ? String(tr.slot.active_pid) : "—"]] : [],
  };
  s.cdc = {
    done: recs.length > 0 && !!(tr && tr.slot.confirmed),
    facts: tr && tr.outbox ? [[["fact.confirmed_lsn"], tr.slot.confirmed_lsn || "—", "mono"]] : [],
  };
  s.kafka = {
    done: recs.length > 0,
    facts: first ? [[["fact.topic"], first.topic, "mono"], [["fact.partition"], String(first.partition)], [["fact.offset"], recs.map((r) => r.offset).join(", ")], [["fact.records"], String(recs.length)]] : [],
  };
  s.member = {
    done: recs.length > 0 && cons.length > 0 && cons.every((c) => c.member || c.processed_at),
    facts: recs.length > 0 ? cons.map((c) => [per("fact.member", c), c.member ? c.member.client_id + " · " + c.member.host + " · " + c.member.member_id.slice(-12) : c.group, "mono"]) : [],
  };
  s.effect = {
    done: cons.length > 0 && cons.every((c) => c.processed_at),
    facts: cons.flatMap((c) => {
      const f = [[per("fact.processed_at", c), c.processed_at ? fmtTime(c.processed_at) : "—"]];
      if (c.changes !== null && c.changes !== undefined) f.push([per("fact.changes", c), String(c.changes)]);
      return f;
    }),
  };
  s.offset = {
    done: !!(tr && tr.state && tr.state.offset === "committed"),
    facts: recs.length > 0 ? cons.map((c) => [per("fact.committed_offset", c), has(c.committed_offset) ? String(c.committed_offset) + (c.committed ? " ✓" : "") : "—"]) : [],
  };
  return STEP_IDS.map((id) => ({ id, ...s[id] }));
}

function factLabel(t, key) {
  const [k, who] = key;
  return who ? t(k) + " (" + who + ")" : t(k);
}

function StatePanel({ state }) {
  const t = useT();
  const st = state || { order: "not_created", outbox: "not_written", changes: 0, offset: "not_committed" };
  const tiles = [
    { id: "order", label: t("state.order"), value: t("state.order." + st.order), good: st.order === "processed" },
    { id: "outbox", label: t("state.outbox"), value: t("state.outbox." + st.outbox), good: st.outbox === "written" },
    { id: "effect", label: t("state.effect"), value: t.n("state.effect", st.changes), good: st.changes === 1 },
    { id: "offset", label: t("state.offset"), value: t("state.offset." + st.offset), good: st.offset === "committed" },
  ];
  return (
    <section class="panel state" aria-labelledby="state-title">
      <h2 id="state-title">{t("state.title")}</h2>
      <dl class="tiles">
        {tiles.map((x) => (
          <div class={"tile" + (x.good ? " good" : "")} data-state-tile={x.id}>
            <dt>{x.label}</dt>
            <dd>{x.value}</dd>
          </div>
        ))}
      </dl>
    </section>
  );
}

export function DeliveryPath({ auth }) {
  const t = useT();
  const [order, setOrder] = useState(null); // {order_id, event_id}
  const [trace, setTrace] = useState(null);
  const [sending, setSending] = useState(false);
  const [error, setError] = useState("");
  const [focus, setFocus] = useState(null);
  const [showAll, setShowAll] = useState(false);
  const [settledPolls, setSettledPolls] = useState(0);

  const steps = deriveSteps(trace, t);
  const doneCount = steps.filter((s) => s.done).length;
  const allDone = order && doneCount === steps.length;

  usePoll(
    async () => {
      if (!order) return;
      try {
        const tr = await guard(auth, api.trace(order.order_id));
        if (tr) {
          setTrace(tr);
          setError("");
          if (deriveSteps(tr).every((s) => s.done)) setSettledPolls((n) => n + 1);
        }
      } catch (e) {
        setError(String(e.message || e));
      }
    },
    700,
    [order && order.order_id, auth.epoch],
    !!order && settledPolls < 2,
  );

  const send = async () => {
    setSending(true);
    setError("");
    try {
      const resp = await api.createOrder();
      setTrace(null);
      setSettledPolls(0);
      setOrder({ order_id: resp.order.order_id, event_id: resp.event_id });
    } catch (e) {
      setError(String(e.message || e));
    } finally {
      setSending(false);
    }
  };

  return (
    <div class="view">
      <p class="intro">{t("path.intro")}</p>
      <div class="toolbar">
        <button type="button" class="primary" id="send-order" onClick={send} disabled={sending}>
          {sending ? t("path.sending") : t("path.send")}
        </button>
        <button type="button" id="step-through" onClick={() => setFocus(focus === null ? 0 : null)} aria-pressed={focus !== null}>
          {t("path.stepThrough")}
        </button>
        <button type="button" id="read-all" onClick={() => setShowAll(!showAll)} aria-pressed={showAll}>
          {showAll ? t("path.hideAll") : t("path.readAll")}
        </button>
      </div>
      {error && <p class="error" role="alert">{t("common.error")}: {error}</p>}
      <div class="ids" aria-live="polite">
        {order ? (
          <>
            <div>
              <span class="muted">{t("path.orderId")}</span> <code id="order-id">{order.order_id}</code>
            </div>
            <div>
              <span class="muted">{t("path.eventId")}</span> <code id="event-id">{order.event_id}</code>
            </div>
            <div class={allDone ? "progress done" : "progress"} id="path-progress">
              {allDone ? t("path.allDone") : t("path.progress", { done: doneCount, total: steps.length })}
            </div>
          </>
        ) : (
          <span class="muted">{t("path.noOrder")}</span>
        )}
      </div>
      {focus !== null && (
        <div class="stepper" role="region" aria-live="polite" aria-label={t("path.stepThrough")}>
          <button type="button" id="step-prev" onClick={() => setFocus(Math.max(0, focus - 1))} disabled={focus === 0}>
            ← {t("path.prev")}
          </button>
          <div class="stepper-text">
            <div class="muted">{t("path.stepOf", { n: focus + 1, total: steps.length })}</div>
            <strong>{t("step." + steps[focus].id + ".title")}</strong>
            <p id="step-sentence">
              <Rich text={t("step." + steps[focus].id + ".text")} />
            </p>
          </div>
          <button type="button" id="step-next" onClick={() => setFocus(Math.min(steps.length - 1, focus + 1))} disabled={focus === steps.length - 1}>
            {t("path.next")} →
          </button>
        </div>
      )}
      <div class="path-layout">
        <ol class="flow" aria-label={t("path.diagram")}>
          {steps.map((s, i) => (
            <li
              class={"node" + (s.done ? " done" : "") + (focus === i ? " focus" : "")}
              data-step={s.id}
              data-state={s.done ? "done" : "waiting"}
              aria-current={focus === i ? "step" : undefined}
            >
              <div class="node-head">
                <span class="num" aria-hidden="true">{i + 1}</span>
                <h3>{t("step." + s.id + ".title")}</h3>
                <span class={"pill " + (s.done ? "ok" : "wait")}>{s.done ? "✓ " + t("common.done") : t("common.waiting")}</span>
              </div>
              {(showAll || focus === i) && (
                <p class="sentence">
                  <Rich text={t("step." + s.id + ".text")} />
                </p>
              )}
              {s.facts.length > 0 && (
                <dl class="facts">
                  {s.facts.map(([key, value, kind]) => (
                    <div>
                      <dt>{factLabel(t, key)}</dt>
                      <dd class={kind === "id" || kind === "mono" ? "mono" : ""} data-fact={key[0].replace("fact.", "")}>
                        {value}
                      </dd>
                    </div>
                  ))}
                </dl>
              )}
            </li>
          ))}
        </ol>
        <StatePanel state={trace && trace.state} />
      </div>
    </div>
  );
}
