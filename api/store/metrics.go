package store

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The store's metrics, registered by the first New, so that only a process
// that writes orders exports them (the binary links this package into every
// component).
var (
	// groupSize counts the creates of each key-less create transaction.
	groupSize prometheus.Histogram
	// answerLost counts order writes whose commit was sent and whose answer
	// was lost, by what resolve found (resolve.go).
	answerLost      *prometheus.CounterVec
	registerMetrics = sync.OnceFunc(func() {
		groupSize = promauto.NewHistogram(prometheus.HistogramOpts{
			Name:    "eventforge_api_create_group_size",
			Help:    "Orders committed per transaction of creates without an idempotency key (1: written alone).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		})
		answerLost = promauto.NewCounterVec(prometheus.CounterOpts{
			Name: "eventforge_api_commit_answer_lost_total",
			Help: "Order creates and cancels whose commit was sent and whose answer was lost, by what the api then found: " +
				"committed (answered as a success), rolled_back (answered not written), unknown (answered outcome unknown).",
		}, []string{"resolution"})
		for _, r := range []string{resolutionCommitted, resolutionRolledBack, resolutionUnknown} {
			answerLost.WithLabelValues(r)
		}
	})
)

// Values of answerLost's resolution label.
const (
	resolutionCommitted  = "committed"
	resolutionRolledBack = "rolled_back"
	resolutionUnknown    = "unknown"
)
