package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/schema"
)

// Sample is one point of the operations charts. A nil field means the
// figure was not available at that moment (its source was down or does not
// export it).
type Sample struct {
	// At is the sampling time in Unix milliseconds.
	At int64 `json:"t"`
	// SlotLagBytes is the server's WAL position minus the slot's
	// confirmed_flush_lsn.
	SlotLagBytes *float64 `json:"slot_lag_bytes"`
	// RetainedWALBytes is the server's WAL position minus the slot's
	// restart_lsn: WAL the server keeps for the slot.
	RetainedWALBytes *float64 `json:"retained_wal_bytes"`
	// SlotLagSeconds is the CDC reader's replication lag (heartbeat round
	// trip, eventforge_cdc_replication_lag_seconds).
	SlotLagSeconds *float64 `json:"slot_lag_seconds"`
	// OldestUnpublishedSeconds is eventforge_cdc_oldest_unpublished_age_seconds.
	OldestUnpublishedSeconds *float64 `json:"oldest_unpublished_seconds"`
	// PublishRate is records per second appended to the topic.
	PublishRate *float64 `json:"publish_rate"`
	// PublishErrorsRate is eventforge_cdc_publish_errors_total per second.
	PublishErrorsRate *float64 `json:"publish_errors_rate"`
	// ConsumerLag is, per consumer, the end offsets of the topic minus the
	// group's committed offsets, summed over partitions.
	ConsumerLag map[string]*float64 `json:"consumer_lag"`
	// RetriesRate is eventforge_consumer_retries_total per second.
	RetriesRate *float64 `json:"retries_rate"`
	// DLQEvents is the number of records in the DLQ topic.
	DLQEvents *float64 `json:"dlq_events"`
	// DLQOldestSeconds is the age of the oldest DLQ record.
	DLQOldestSeconds *float64 `json:"dlq_oldest_seconds"`
	// DLQPending and DLQReplayed split DLQEvents: dead letters not
	// replayed since they were dead-lettered, and those whose event was
	// replayed since (they stay until a purge).
	DLQPending  *float64 `json:"dlq_pending"`
	DLQReplayed *float64 `json:"dlq_replayed"`
	// DLQOldestPendingSeconds is the age of the oldest pending record.
	DLQOldestPendingSeconds *float64 `json:"dlq_oldest_pending_seconds"`
}

// history is a ring of samples.
type history struct {
	mu   sync.Mutex
	max  int
	data []Sample
}

func newHistory(maxSamples int) *history { return &history{max: maxSamples} }

func (h *history) add(s Sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.data = append(h.data, s)
	if len(h.data) > h.max {
		h.data = append(h.data[:0:0], h.data[len(h.data)-h.max:]...)
	}
}

// since returns the samples taken after t (Unix ms).
func (h *history) since(t int64) []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := []Sample{}
	for _, s := range h.data {
		if s.At > t {
			out = append(out, s)
		}
	}
	return out
}

func (c *Console) handleMetrics(w http.ResponseWriter, r *http.Request) {
	var since int64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "since must be Unix milliseconds")
			return
		}
		since = n
	}
	writeJSON(w, http.StatusOK, map[string]any{"samples": c.samples.since(since), "consumers": sortedKeys(c.cfg.Consumers)})
}

// sampler turns the console's sources into Samples; counters become rates
// against the previous sample.
type sampler struct {
	c          *Console
	client     *http.Client
	prevAt     time.Time
	prevEnds   *float64
	prevErrors *float64
	prevRetry  *float64
}

func newSampler(c *Console) *sampler {
	return &sampler{c: c, client: &http.Client{Timeout: time.Second}}
}

// reset forgets the previous readings, so that rates after an idle period
// are not computed over it.
func (s *sampler) reset() {
	s.prevAt, s.prevEnds, s.prevErrors, s.prevRetry = time.Time{}, nil, nil, nil
}

func (s *sampler) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.c.cfg.SampleInterval+5*time.Second)
	defer cancel()
	now := time.Now()
	smp := Sample{At: now.UnixMilli(), ConsumerLag: map[string]*float64{}}
	dt := now.Sub(s.prevAt).Seconds()
	first := s.prevAt.IsZero()

	st, err := schema.ReadSlotStatus(ctx, s.c.pool, s.c.cfg.Slot)
	if err == nil {
		smp.SlotLagBytes = lsnDiff(&st.CurrentWALLSN, &st.ConfirmedFlushLSN)
		smp.RetainedWALBytes = lsnDiff(&st.CurrentWALLSN, &st.RestartLSN)
	} else if ctx.Err() == nil && !errors.Is(err, schema.ErrSlotNotFound) {
		s.c.logger.Debug("sampling slot", "slot", s.c.cfg.Slot, "err", err)
	}

	ends, err := s.c.kafka.EndOffsets(s.c.cfg.Topic)
	if err == nil {
		var total float64
		parts := make([]int32, 0, len(ends))
		for p, e := range ends {
			total += float64(e)
			parts = append(parts, p)
		}
		if !first && s.prevEnds != nil {
			smp.PublishRate = ptr(math.Max(0, (total-*s.prevEnds)/dt))
		}
		s.prevEnds = &total
		for name, group := range s.c.cfg.Consumers {
			committed, err := s.c.committed(ctx, group, s.c.cfg.Topic, parts)
			if err != nil {
				continue
			}
			var lag float64
			for p, e := range ends {
				if off, ok := committed[p]; ok {
					lag += float64(max(0, e-off))
				} else {
					lag += float64(e) // nothing committed: everything is behind
				}
			}
			smp.ConsumerLag[name] = ptr(lag)
		}
	} else {
		s.prevEnds = nil
	}

	s.sampleDLQ(ctx, now, &smp)

	fams := s.scrape(ctx)
	smp.SlotLagSeconds = gaugeMax(fams, "eventforge_cdc_replication_lag_seconds")
	smp.OldestUnpublishedSeconds = gaugeMax(fams, "eventforge_cdc_oldest_unpublished_age_seconds")
	errs := counterSum(fams, "eventforge_cdc_publish_errors_total")
	retries := counterSum(fams, "eventforge_consumer_retries_total")
	if !first {
		smp.PublishErrorsRate = rate(s.prevErrors, errs, dt)
		smp.RetriesRate = rate(s.prevRetry, retries, dt)
	}
	s.prevErrors, s.prevRetry, s.prevAt = errs, retries, now
	s.c.samples.add(smp)
}

// sampleDLQ counts the DLQ's records held, pending and replayed
// (dlqTracker), and the age of the oldest held and oldest pending one.
func (s *sampler) sampleDLQ(ctx context.Context, now time.Time, smp *Sample) {
	rs, err := s.c.dlqs.refresh(ctx)
	if err != nil {
		s.c.logger.Debug("sampling dlq", "topic", s.c.cfg.dlqTopic(), "err", err)
		return
	}
	var pending, replayed float64
	var oldest, oldestPending time.Time
	for _, r := range rs {
		if oldest.IsZero() || r.Timestamp.Before(oldest) {
			oldest = r.Timestamp
		}
		if r.State == dlq.StateReplayed {
			replayed++
			continue
		}
		pending++
		if oldestPending.IsZero() || r.Timestamp.Before(oldestPending) {
			oldestPending = r.Timestamp
		}
	}
	smp.DLQEvents, smp.DLQPending, smp.DLQReplayed = ptr(float64(len(rs))), ptr(pending), ptr(replayed)
	if !oldest.IsZero() {
		smp.DLQOldestSeconds = ptr(max(now.Sub(oldest).Seconds(), 0)) // the broker's clock may run ahead
	}
	if !oldestPending.IsZero() {
		smp.DLQOldestPendingSeconds = ptr(max(now.Sub(oldestPending).Seconds(), 0))
	}
}

// scrape reads this process's registry and every configured /metrics
// endpoint; unreachable sources are skipped.
func (s *sampler) scrape(ctx context.Context) []map[string]*dto.MetricFamily {
	var out []map[string]*dto.MetricFamily
	if fams, err := prometheus.DefaultGatherer.Gather(); err == nil {
		m := map[string]*dto.MetricFamily{}
		for _, f := range fams {
			m[f.GetName()] = f
		}
		out = append(out, m)
	}
	for name, url := range s.c.cfg.MetricsSources {
		fams, err := s.fetch(ctx, url)
		if err != nil {
			s.c.logger.Debug("scraping metrics", "source", name, "url", url, "err", err)
			continue
		}
		out = append(out, fams)
	}
	return out
}

func (s *sampler) fetch(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// gaugeMax is the largest value of a gauge over all sources and label sets.
func gaugeMax(sources []map[string]*dto.MetricFamily, name string) *float64 {
	return fold(sources, name, func(m *dto.Metric) float64 { return m.GetGauge().GetValue() },
		func(acc *float64, v float64) *float64 {
			if acc == nil || v > *acc {
				return ptr(v)
			}
			return acc
		})
}

// counterSum is the sum of a counter over all sources and label sets.
func counterSum(sources []map[string]*dto.MetricFamily, name string) *float64 {
	return fold(sources, name, func(m *dto.Metric) float64 { return m.GetCounter().GetValue() },
		func(acc *float64, v float64) *float64 {
			if acc == nil {
				return ptr(v)
			}
			return ptr(*acc + v)
		})
}

// fold combines the values of metric name over all sources and label sets;
// value reads a typed sample, an untyped one is read as it is. It is nil
// when no source has the metric.
func fold(sources []map[string]*dto.MetricFamily, name string, value func(*dto.Metric) float64,
	combine func(acc *float64, v float64) *float64) *float64 {
	var out *float64
	for _, fams := range sources {
		f, ok := fams[name]
		if !ok {
			continue
		}
		for _, m := range f.GetMetric() {
			v := value(m)
			if m.GetGauge() == nil && m.GetCounter() == nil {
				v = m.GetUntyped().GetValue()
			}
			out = combine(out, v)
		}
	}
	return out
}

// rate turns two counter readings into a per-second rate. A counter that
// went down (its process restarted) counts from zero.
func rate(prev, cur *float64, dt float64) *float64 {
	if prev == nil || cur == nil || dt <= 0 {
		return nil
	}
	d := *cur - *prev
	if d < 0 {
		d = *cur
	}
	return ptr(d / dt)
}

func lsnDiff(a, b *string) *float64 {
	if a == nil || b == nil {
		return nil
	}
	x, err1 := pglogrepl.ParseLSN(*a)
	y, err2 := pglogrepl.ParseLSN(*b)
	if err1 != nil || err2 != nil {
		return nil
	}
	if x < y {
		return ptr(0.0)
	}
	return ptr(float64(x - y))
}

func ptr[T any](v T) *T { return &v }
