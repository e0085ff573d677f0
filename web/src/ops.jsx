import { useEffect, useRef, useState } from "preact/hooks";
import uPlot from "uplot";
import { useT } from "./i18n.js";
import { api } from "./api.js";
import { fmtAge, fmtBytes, fmtNum, fmtTime, guard, short, usePoll } from "./util.js";

const COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2"];

// Chart draws one uPlot time series chart that follows its container's
// width.
function Chart({ data, series, format, axisFormat, integer, id }) {
  const box = useRef(null);
  const plot = useRef(null);
  const key = series.map((s) => s.label).join("|");
  useEffect(() => {
    const el = box.current;
    const width = Math.max(200, el.clientWidth);
    const opts = {
      width,
      height: 170,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(integer ? 4 : 1, (max || 0) * 1.15)] } },
      axes: [
        { stroke: "#475569", grid: { stroke: "#e2e8f0" }, ticks: { stroke: "#cbd5e1" } },
        {
          stroke: "#475569",
          grid: { stroke: "#e2e8f0" },
          ticks: { stroke: "#cbd5e1" },
          size: 84,
          incrs: integer ? [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 1e6] : undefined,
          values: (u, vals) => vals.map((v) => (axisFormat || format)(v)),
        },
      ],
      series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: false, value: (u, v) => format(v) }))],
    };
    plot.current = new uPlot(opts, data, el);
    const ro = new ResizeObserver(() => {
      if (plot.current) plot.current.setSize({ width: Math.max(200, el.clientWidth), height: 170 });
    });
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot.current.destroy();
      plot.current = null;
    };
  }, [key]);
  useEffect(() => {
    if (plot.current) plot.current.setData(data);
  }, [data]);
  return <div class="chart" ref={box} id={id} />;
}

function ChartCard({ title, samples, series, format, axisFormat, integer, id }) {
  const t = useT();
  const xs = samples.map((s) => s.t / 1000);
  const cols = series.map((s) => samples.map((x) => s.get(x)));
  const data = [xs, ...cols];
  const last = series.map((s, i) => {
    for (let j = cols[i].length - 1; j >= 0; j--) if (cols[i][j] != null) return cols[i][j];
    return null;
  });
  const hasData = last.some((v) => v != null);
  return (
    <section class="panel chart-card" aria-labelledby={id + "-title"} data-chart={id}>
      <div class="chart-head">
        <h2 id={id + "-title"}>{title}</h2>
        <div class="now" aria-live="off">
          {series.map((s, i) => (
            <span>
              {series.length > 1 && <span class="swatch" style={{ background: COLORS[i % COLORS.length] }} aria-hidden="true" />}
              {series.length > 1 ? s.label + ": " : t("ops.now") + ": "}
              <strong data-now={id + (series.length > 1 ? "-" + i : "")}>{last[i] == null ? "—" : format(last[i])}</strong>
            </span>
          ))}
        </div>
      </div>
      {hasData || samples.length > 0 ? <Chart data={data} series={series} format={format} axisFormat={axisFormat} integer={integer} id={id + "-plot"} /> : null}
      {!hasData && <p class="muted nodata">{t("ops.noData")}</p>}
    </section>
  );
}

function DLQTable({ auth }) {
  const t = useT();
  const [dlq, setDLQ] = useState(null);
  const [busy, setBusy] = useState({});
  const [done, setDone] = useState({});
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
    setBusy({ ...busy, [row.position]: true });
    try {
      await guard(auth, api.replay(row.partition, row.offset));
      setDone((d) => ({ ...d, [row.position]: true }));
    } catch (e) {
      setError(String(e.message || e));
    } finally {
      setBusy((b) => ({ ...b, [row.position]: false }));
    }
  };
  return (
    <section class="panel dlq" aria-labelledby="dlq-title">
      <div class="chart-head">
        <h2 id="dlq-title">{t("ops.dlqTable")}</h2>
        <button type="button" onClick={load} id="dlq-refresh">
          {t("ops.refresh")}
        </button>
      </div>
      {error && <p class="error" role="alert">{t("common.error")}: {error}</p>}
      {dlq && <p class="muted">{t("ops.dlqCount", { n: dlq.count, topic: dlq.topic })}</p>}
      {dlq && dlq.entries.length === 0 && <p id="dlq-empty">{t("ops.dlqEmpty")}</p>}
      {dlq && dlq.entries.length > 0 && (
        <div class="table-wrap">
          <table id="dlq-table">
            <thead>
              <tr>
                <th scope="col">{t("ops.col.event")}</th>
                <th scope="col">{t("ops.col.order")}</th>
                <th scope="col">{t("ops.col.consumer")}</th>
                <th scope="col">{t("ops.col.error")}</th>
                <th scope="col">{t("ops.col.attempts")}</th>
                <th scope="col">{t("ops.col.failed")}</th>
                <th scope="col">{t("ops.col.age")}</th>
                <th scope="col">{t("ops.col.action")}</th>
              </tr>
            </thead>
            <tbody>
              {dlq.entries.map((r) => (
                <tr data-event-id={r.event_id} data-order-id={r.order_id}>
                  <td>
                    <code title={r.event_id}>{short(r.event_id)}</code>
                    <div class="muted small">{r.type}</div>
                  </td>
                  <td>
                    <code title={r.order_id}>{short(r.order_id)}</code>
                  </td>
                  <td>{r.consumer}</td>
                  <td>
                    <span class="pill bad">{r.error_class}</span>
                    <div class="small err-msg" title={r.error_message}>{r.error_message}</div>
                  </td>
                  <td>{r.attempts}</td>
                  <td class="small">{fmtTime(r.last_failed_at)}</td>
                  <td>{fmtAge(r.age_seconds)}</td>
                  <td>
                    <button
                      type="button"
                      class="replay"
                      onClick={() => replay(r)}
                      disabled={busy[r.position]}
                      aria-label={t("ops.replay") + " " + r.event_id}
                    >
                      {busy[r.position] ? t("ops.replaying") : done[r.position] ? "✓ " + t("ops.replayed") : t("ops.replay")}
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

export function Operations({ auth }) {
  const t = useT();
  const [samples, setSamples] = useState([]);
  const [consumers, setConsumers] = useState([]);
  const [interval, setIntervalMs] = useState(2000);
  const last = useRef(0);
  usePoll(
    async () => {
      const o = await guard(auth, api.overview());
      if (o) setIntervalMs(o.sample_interval_ms || 2000);
    },
    60000,
    [auth.epoch],
  );
  usePoll(
    async () => {
      const m = await guard(auth, api.metrics(last.current));
      if (!m) return;
      setConsumers(m.consumers);
      if (m.samples.length > 0) {
        last.current = m.samples[m.samples.length - 1].t;
        setSamples((prev) => prev.concat(m.samples).slice(-900));
      }
    },
    interval,
    [auth.epoch],
  );
  const num = (v) => fmtNum(v, 2);
  const secs = (v) => (v == null ? "—" : v < 10 ? v.toFixed(2) + " s" : fmtAge(v));
  const axisSecs = (v) => (v == null ? "" : v < 10 ? fmtNum(v, 1) + " s" : Math.round(v) + " s");
  const axisBytes = (v) => (v == null ? "" : fmtBytes(v).replace(/\.\d /, " "));
  return (
    <div class="view">
      <p class="intro">{t("ops.intro", { s: interval / 1000 })}</p>
      <div class="charts">
        <ChartCard id="slot-lag-bytes" title={t("ops.slotLagBytes")} samples={samples} format={fmtBytes} axisFormat={axisBytes} series={[{ label: "bytes", get: (s) => s.slot_lag_bytes }]} />
        <ChartCard id="slot-lag-seconds" title={t("ops.slotLagSeconds")} samples={samples} format={secs} axisFormat={axisSecs} series={[{ label: "s", get: (s) => s.slot_lag_seconds }]} />
        <ChartCard id="retained-wal" title={t("ops.retainedWal")} samples={samples} format={fmtBytes} axisFormat={axisBytes} series={[{ label: "bytes", get: (s) => s.retained_wal_bytes }]} />
        <ChartCard id="oldest-unpublished" title={t("ops.oldestUnpublished")} samples={samples} format={secs} axisFormat={axisSecs} series={[{ label: "s", get: (s) => s.oldest_unpublished_seconds }]} />
        <ChartCard
          id="publish"
          title={t("ops.publish")}
          samples={samples}
          format={num}
          series={[
            { label: t("ops.publishRate"), get: (s) => s.publish_rate },
            { label: t("ops.publishErrors"), get: (s) => s.publish_errors_rate },
          ]}
        />
        <ChartCard
          id="consumer-lag"
          title={t("ops.consumerLag")}
          samples={samples}
          format={(v) => fmtNum(v, 0)}
          integer
          series={consumers.map((c) => ({ label: c, get: (s) => (s.consumer_lag ? s.consumer_lag[c] ?? null : null) }))}
        />
        <ChartCard id="retries" title={t("ops.retries")} samples={samples} format={num} series={[{ label: "/s", get: (s) => s.retries_rate }]} />
        <ChartCard
          id="dlq"
          title={t("ops.dlq")}
          samples={samples}
          format={num}
          series={[
            { label: t("ops.dlqSize"), get: (s) => s.dlq_events },
            { label: t("ops.dlqAge"), get: (s) => s.dlq_oldest_seconds },
          ]}
        />
      </div>
      <DLQTable auth={auth} />
    </div>
  );
}
