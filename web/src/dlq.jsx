import { useState } from "preact/hooks";
import { useT } from "./i18n.js";
import { api } from "./api.js";
import { fmtAge, fmtTime, guard, short, usePoll } from "./util.js";
import { Rich } from "./glossary.jsx";

// ago says how long ago an ISO time was, in t's words.
function ago(iso, t) {
  if (!iso) return "";
  return t("common.ago", { age: fmtAge((Date.now() - new Date(iso).getTime()) / 1000, t) });
}

function StatePill({ row }) {
  const t = useT();
  const cls = row.state === "pending" ? "bad" : row.state === "replayed" ? "ok" : "wait";
  return (
    <>
      <span class={"pill " + cls} data-dlq-state={row.state}>
        {t("ops.state." + row.state)}
      </span>
      {row.state === "replayed" && <div class="muted small">{t("ops.replayedAt", { ago: ago(row.replayed_at, t) })}</div>}
      {row.state === "purged" && <div class="muted small">{t("ops.purgedAt", { ago: ago(row.purged_at, t) })}</div>}
    </>
  );
}

// Row is one dead letter; only a pending one can be replayed from here.
function Row({ r, busy, onReplay }) {
  const t = useT();
  return (
    <tr data-event-id={r.event_id} data-order-id={r.order_id} data-state={r.state} class={"dlq-row " + r.state}>
      <td>
        <code title={r.event_id}>{short(r.event_id)}</code>
        <div class="muted small">{r.type}</div>
      </td>
      <td>
        <StatePill row={r} />
      </td>
      <td>
        {r.state === "pending" && (
          <button type="button" class="replay" onClick={() => onReplay(r)} disabled={busy} aria-label={t("ops.replay") + " " + r.event_id}>
            {busy ? t("ops.replaying") : t("ops.replay")}
          </button>
        )}
      </td>
      <td>
        <code title={r.order_id}>{short(r.order_id)}</code>
      </td>
      <td>{r.consumer}</td>
      <td>
        <span class="pill bad">{r.error_class}</span>
        {r.error_message && <div class="small err-msg" title={r.error_message}>{r.error_message}</div>}
      </td>
      <td>{r.state === "purged" ? "—" : r.attempts}</td>
      <td class="small">{fmtTime(r.last_failed_at)}</td>
      <td>{r.age_seconds ? fmtAge(r.age_seconds, t) : "—"}</td>
    </tr>
  );
}

function Table({ id, rows, busy, onReplay }) {
  const t = useT();
  // State and action come first: on a phone they are in sight before the
  // table scrolls.
  const cols = ["event", "state", "action", "order", "consumer", "error", "attempts", "failed", "age"];
  return (
    <div class="table-wrap">
      <table id={id}>
        <thead>
          <tr>
            {cols.map((c) => (
              <th scope="col">{t("ops.col." + c)}</th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <Row r={r} busy={!!busy[r.position]} onReplay={onReplay} />
          ))}
        </tbody>
      </table>
    </div>
  );
}

// DLQTable lists the DLQ's records with their state (pending, replayed,
// purged) and replays a pending one.
export function DLQTable({ auth }) {
  const t = useT();
  const [dlq, setDLQ] = useState(null);
  const [busy, setBusy] = useState({});
  const [error, setError] = useState("");
  const load = async () => {
    try {
      const d = await guard(auth, api.dlq());
      if (d) {
        setDLQ(d);
        setError("");
      }
    } catch (e) {
      setError(String(e.message || e));
    }
  };
  usePoll(load, 3000, [auth.epoch]);
  const replay = async (row) => {
    setBusy((b) => ({ ...b, [row.position]: true }));
    try {
      await guard(auth, api.replay(row.partition, row.offset));
      await load();
    } catch (e) {
      setError(String(e.message || e));
    } finally {
      setBusy((b) => ({ ...b, [row.position]: false }));
    }
  };
  const purged = (dlq && dlq.purged_entries) || [];
  return (
    <section class="panel dlq" aria-labelledby="dlq-title">
      <div class="chart-head">
        <h2 id="dlq-title">{t("ops.dlqTable")}</h2>
        <button type="button" onClick={load} id="dlq-refresh">
          {t("ops.refresh")}
        </button>
      </div>
      {error && <p class="error" role="alert">{t("common.error")}: {error}</p>}
      {dlq && (
        <p class="muted" id="dlq-counts">
          {t.n("ops.dlqHeld", dlq.count, { topic: dlq.topic })}. {t("ops.dlqStates", { pending: dlq.pending, replayed: dlq.replayed, purged: dlq.purged })}
        </p>
      )}
      {dlq && dlq.replayed > 0 && (
        <p class="muted small">
          <Rich text={t("ops.replayNote")} />
        </p>
      )}
      {dlq && dlq.entries.length === 0 && <p id="dlq-empty">{t("ops.dlqEmpty")}</p>}
      {dlq && dlq.entries.length > 0 && <Table id="dlq-table" rows={dlq.entries} busy={busy} onReplay={replay} />}
      {dlq && dlq.purged > 0 && (
        <details class="purged" id="dlq-purged">
          <summary>
            {t("ops.purgedTitle")}: {dlq.purged}
          </summary>
          <Table id="dlq-purged-table" rows={purged} busy={{}} onReplay={() => {}} />
        </details>
      )}
    </section>
  );
}
