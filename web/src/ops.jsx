import { useEffect, useRef, useState } from "preact/hooks";
import uPlot from "uplot";
import { useT } from "./i18n.js";
import { api } from "./api.js";
import { byteAxis, byteLabels, byteRange, timeLabels } from "./axis.js";
import { byteUnits, fmtAge, fmtBytes, fmtNum, guard, usePoll } from "./util.js";
import { Rich } from "./glossary.jsx";
import { DLQTable } from "./dlq.jsx";

const COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2"];
const ALERT_COLOR = { warning: "#d97706", critical: "#dc2626" };
const HEIGHT = 170;
// PLOT_PX is the plot area's height within HEIGHT (less the time axis):
// the byte axis lays its ticks out for it.
const PLOT_PX = 130;
const COUNT_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 1e6];

// formatter returns how a chart of kind shows a reading.
function formatter(kind, t) {
  switch (kind) {
    case "bytes":
      return (v) => fmtBytes(v, t);
    case "secs":
      return (v) => (v == null ? "—" : v < 10 ? fmtNum(v, 2, t) + " " + t("unit.s") : fmtAge(v, t));
    case "count":
      return (v) => fmtNum(v, 0, t);
    default:
      return (v) => fmtNum(v, 2, t);
  }
}

// shown returns an axis's labels and keeps them, as the canvas shows them,
// in the chart's data-axis-<scale> attribute (what the browser test reads).
function shown(u, scale, labels) {
  u.root.dataset["axis" + scale[0].toUpperCase() + scale.slice(1)] = labels.join("|");
  return labels;
}

// yAxis is the uPlot axis of kind on scale.
function yAxis(kind, scale, t, side) {
  const base = { scale, side, stroke: "#475569", grid: { stroke: "#e2e8f0", show: side !== 1 }, ticks: { stroke: "#cbd5e1" }, size: 84 };
  if (kind === "bytes") {
    const units = byteUnits(t);
    return { ...base, splits: (u) => byteAxis(u.scales[scale].max, PLOT_PX).ticks, values: (u, splits) => shown(u, scale, byteLabels(splits, units)) };
  }
  if (kind === "secs") {
    return { ...base, values: (u, vals) => shown(u, scale, vals.map((v) => (v == null ? "" : v < 10 ? fmtNum(v, 1, t) : fmtNum(Math.round(v), 0, t)) + " " + t("unit.s"))) };
  }
  return { ...base, incrs: kind === "count" ? COUNT_INCRS : undefined, values: (u, vals) => shown(u, scale, vals.map((v) => fmtNum(v, kind === "count" ? 0 : 2, t))) };
}

// alertShown: the alert line is drawn once the data reach a quarter of it
// (the scale then stretches to it); below that it would flatten the data.
function alertShown(alert, dataMax) {
  return !!alert && dataMax >= alert.value / 4;
}

// yRange is the scale of kind from 0 to past the data (and the alert
// line, when shown).
function yRange(kind, alert) {
  return (u, min, max) => {
    let top = Math.max(kind === "count" ? 4 : kind === "bytes" ? 0 : 1, (max || 0) * 1.15);
    if (alertShown(alert, max || 0)) top = Math.max(top, alert.value * 1.05);
    return kind === "bytes" ? byteRange(top, PLOT_PX) : [0, top];
  };
}

// drawAlert draws the alert's threshold as a dashed line.
function drawAlert(alert) {
  return (u) => {
    const sc = u.scales.y;
    if (!alert || alert.value > sc.max || alert.value < sc.min) return;
    const ctx = u.ctx;
    const y = Math.round(u.valToPos(alert.value, "y", true));
    ctx.save();
    ctx.strokeStyle = ALERT_COLOR[alert.severity] || "#dc2626";
    ctx.lineWidth = 2 * devicePixelRatio;
    ctx.setLineDash([6 * devicePixelRatio, 4 * devicePixelRatio]);
    ctx.beginPath();
    ctx.moveTo(u.bbox.left, y);
    ctx.lineTo(u.bbox.left + u.bbox.width, y);
    ctx.stroke();
    ctx.restore();
  };
}

// Chart draws one uPlot time series chart that follows its container's
// width: series on the left axis (kind), those with right: true on a
// second, right axis (rightKind).
function Chart({ data, series, kind, rightKind, alert, id }) {
  const t = useT();
  const box = useRef(null);
  const plot = useRef(null);
  const key = series.map((s) => s.label).join("|") + t.lang + (alert ? alert.value : "");
  useEffect(() => {
    const el = box.current;
    const fmt = formatter(kind, t);
    const fmtRight = formatter(rightKind, t);
    const axes = [
      { stroke: "#475569", grid: { stroke: "#e2e8f0" }, ticks: { stroke: "#cbd5e1" }, space: 70, values: (u, splits) => shown(u, "x", timeLabels(splits, t.lang)) },
      yAxis(kind, "y", t, 3),
    ];
    const scales = { x: { time: true }, y: { range: yRange(kind, alert) } };
    if (rightKind) {
      axes.push(yAxis(rightKind, "right", t, 1));
      scales.right = { range: yRange(rightKind) };
    }
    const opts = {
      width: Math.max(200, el.clientWidth),
      height: HEIGHT,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales,
      axes,
      hooks: { draw: [drawAlert(alert)] },
      series: [
        {},
        ...series.map((s, i) => ({
          label: s.label, scale: s.right ? "right" : "y", stroke: COLORS[i % COLORS.length], width: 2, spanGaps: false,
          dash: s.right ? [4, 3] : undefined, value: (u, v) => (s.right ? fmtRight : fmt)(v),
        })),
      ],
    };
    plot.current = new uPlot(opts, data, el);
    const ro = new ResizeObserver(() => {
      if (plot.current) plot.current.setSize({ width: Math.max(200, el.clientWidth), height: HEIGHT });
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
  return <div class="chart" ref={box} id={id} data-kind={kind} />;
}

function ChartCard({ title, note, samples, series, kind, rightKind, alert, id }) {
  const t = useT();
  const xs = samples.map((s) => s.t / 1000);
  const cols = series.map((s) => samples.map((x) => s.get(x)));
  const data = [xs, ...cols];
  // "now" is the latest sample's value: a series that has none now (no
  // pending DLQ record, a consumer not scraped) reads "—", never an
  // older value.
  const last = cols.map((c) => (c.length > 0 ? (c[c.length - 1] ?? null) : null));
  const hasData = cols.some((c) => c.some((v) => v != null));
  let dataMax = 0;
  cols.forEach((c, i) => !series[i].right && c.forEach((v) => (dataMax = Math.max(dataMax, v || 0))));
  const fmt = formatter(kind, t);
  return (
    <section class="panel chart-card" aria-labelledby={id + "-title"} data-chart={id}>
      <div class="chart-head">
        <h2 id={id + "-title"}>{title}</h2>
        <div class="now" aria-live="off">
          {series.map((s, i) => (
            <span>
              {series.length > 1 && <span class={"swatch" + (s.right ? " dashed" : "")} style={{ background: COLORS[i % COLORS.length] }} aria-hidden="true" />}
              {series.length > 1 ? s.label + ": " : t("ops.now") + ": "}
              <strong data-now={id + (series.length > 1 ? "-" + i : "")}>{last[i] == null ? "—" : formatter(s.right ? rightKind : kind, t)(last[i])}</strong>
            </span>
          ))}
        </div>
      </div>
      {note && <p class="chart-note small">{note}</p>}
      {hasData || samples.length > 0 ? <Chart data={data} series={series} kind={kind} rightKind={rightKind} alert={alert} id={id + "-plot"} /> : null}
      {!hasData && <p class="muted nodata">{t("ops.noData")}</p>}
      {alert && (
        <p class={"alert-line small " + (alert.severity || "")} data-alert={alert.alert} data-alert-value={alert.value}>
          <span class="alert-swatch" aria-hidden="true" />
          {t("ops.alert", { alert: alert.alert, severity: t("severity." + alert.severity), value: fmt(alert.value), for: fmtAge(alert.for_seconds, t) })}
          {!alertShown(alert, dataMax) && " " + t("ops.alertOffScale")}
        </p>
      )}
    </section>
  );
}

export function Operations({ auth }) {
  const t = useT();
  const [samples, setSamples] = useState([]);
  const [consumers, setConsumers] = useState([]);
  const [interval, setIntervalMs] = useState(2000);
  const [alerts, setAlerts] = useState({});
  const last = useRef(0);
  usePoll(
    async () => {
      const o = await guard(auth, api.overview());
      if (o) {
        setIntervalMs(o.sample_interval_ms || 2000);
        setAlerts(o.alerts || {});
      }
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
  const card = (id, title, kind, series, extra = {}) => <ChartCard id={id} title={title} samples={samples} kind={kind} series={series} {...extra} />;
  return (
    <div class="view">
      <p class="intro">{t("ops.intro", { s: fmtNum(interval / 1000, 1, t) })}</p>
      <div class="charts">
        {card("slot-lag-bytes", t("ops.slotLagBytes"), "bytes", [{ label: "bytes", get: (s) => s.slot_lag_bytes }], {
          note: <Rich text={t("ops.slotLagBytes.note")} />,
          alert: alerts.slot_lag_bytes,
        })}
        {card("slot-lag-seconds", t("ops.slotLagSeconds"), "secs", [{ label: "s", get: (s) => s.slot_lag_seconds }], { alert: alerts.slot_lag_seconds })}
        {card("retained-wal", t("ops.retainedWal"), "bytes", [{ label: "bytes", get: (s) => s.retained_wal_bytes }], {
          note: <Rich text={t("ops.retainedWal.note")} />,
          alert: alerts.retained_wal_bytes,
        })}
        {card("oldest-unpublished", t("ops.oldestUnpublished"), "secs", [{ label: "s", get: (s) => s.oldest_unpublished_seconds }], {
          alert: alerts.oldest_unpublished_seconds,
        })}
        {card("publish", t("ops.publish"), "rate", [
          { label: t("ops.publishRate"), get: (s) => s.publish_rate },
          { label: t("ops.publishErrors"), get: (s) => s.publish_errors_rate },
        ])}
        {card(
          "consumer-lag",
          t("ops.consumerLag"),
          "count",
          consumers.map((c) => ({ label: c, get: (s) => (s.consumer_lag ? s.consumer_lag[c] ?? null : null) })),
          { alert: alerts.consumer_lag },
        )}
        {card("retries", t("ops.retries"), "rate", [{ label: t("unit.perSecond"), get: (s) => s.retries_rate }])}
        {card(
          "dlq",
          t("ops.dlq"),
          "count",
          [
            { label: t("ops.dlqPending"), get: (s) => s.dlq_pending },
            { label: t("ops.dlqReplayed"), get: (s) => s.dlq_replayed },
            { label: t("ops.dlqAge"), get: (s) => s.dlq_oldest_pending_seconds, right: true },
          ],
          { rightKind: "secs" },
        )}
      </div>
      <DLQTable auth={auth} />
    </div>
  );
}
