package console

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/internal/kafkaread"
)

// Component is the state of one process run by a supervisor (`eventforge
// dev`), as the console shows it.
type Component struct {
	// Name is the component, e.g. "cdc" or "consumer-fulfillment".
	Name string `json:"name"`
	// PID is the running process's ID; 0 while it is not running.
	PID int `json:"pid"`
	// Running reports whether a process is up.
	Running bool `json:"running"`
	// Starts counts the processes started so far (restarts = Starts - 1).
	Starts int `json:"starts"`
	// Failpoints are the failpoints armed in the running process.
	Failpoints string `json:"failpoints,omitempty"`
	// LastExit describes how the previous process ended ("killed by
	// SIGKILL", "exit status 1"); empty before the first exit.
	LastExit string `json:"last_exit,omitempty"`
	// LastExitAt is when the previous process ended.
	LastExitAt *time.Time `json:"last_exit_at,omitempty"`
	// LastExitCode is the previous process's exit status, -1 when a signal
	// (LastExitSignal, e.g. "SIGKILL") or something else ended it; the page
	// says LastExit in its own words from these two.
	LastExitCode   int    `json:"last_exit_code"`
	LastExitSignal string `json:"last_exit_signal,omitempty"`
}

// Processes is what the drills need from the supervisor that runs the
// components as child processes. Without one (plain `eventforge api`) the
// drills that crash a component cannot run.
type Processes interface {
	// Restart stops the component and starts it again with failpoints armed
	// (EVENTFORGE_FAILPOINTS) for the new process only; a process the
	// supervisor starts after that one dies runs without them. It returns
	// once the new process started.
	Restart(ctx context.Context, component, failpoints string) error
	// StartExtra starts one more, unsupervised instance of a component with
	// extra flags and failpoints; stop ends it and waits for it.
	StartExtra(ctx context.Context, component string, extraArgs []string, failpoints string) (stop func(), err error)
	// Components lists the supervised components.
	Components() []Component
}

// Console serves the console. Create with New, mount Handler, and Run it
// for the sampler; Run closes its connections when ctx ends.
type Console struct {
	cfg    Config
	logger *slog.Logger
	pool   *pgxpool.Pool
	kafka  *kafkaread.Reader
	admin  *kafka.AdminClient
	procs  Processes

	producerMu sync.Mutex
	producer   *dlq.Producer // DLQ replays (dlq.Replayer)

	samples *history
	dlqs    *dlqTracker
	commits *commitIndex
	lastUse atomic.Int64  // Unix ns of the last ops API request
	wake    chan struct{} // an ops API request arrived
	drills  *drillRunner
	handler http.Handler
}

// New connects the console to PostgreSQL and Kafka. procs may be nil.
func New(ctx context.Context, cfg Config, procs Processes, logger *slog.Logger) (*Console, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid console config: %w", err)
	}
	if cfg.DatabaseURL == "" {
		return nil, errors.New("invalid console config: the database URL is required")
	}
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("parsing database-url: %w", err)
	}
	poolCfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("creating postgres pool: %w", err)
	}
	kr, err := kafkaread.New(cfg.KafkaBrokers)
	if err != nil {
		pool.Close()
		return nil, err
	}
	adminCfg := adminConfig(cfg.KafkaBrokers)
	admin, err := kafka.NewAdminClient(&adminCfg)
	if err != nil {
		kr.Close()
		pool.Close()
		return nil, fmt.Errorf("creating kafka admin client: %w", err)
	}
	c := &Console{
		cfg:     cfg,
		logger:  logger,
		pool:    pool,
		kafka:   kr,
		admin:   admin,
		procs:   procs,
		samples: newHistory(cfg.History),
		dlqs:    newDLQTracker(cfg.KafkaBrokers, cfg.dlqTopic()),
		commits: newCommitIndex(1000),
		wake:    make(chan struct{}, 1),
	}
	c.drills = newDrillRunner(c)
	c.handler = c.routes()
	return c, nil
}

// Handler serves /ui/ (the embedded front end) and /api/ops/ (the ops API).
// Mount it on both prefixes.
func (c *Console) Handler() http.Handler { return c.handler }

// Patterns are the mux patterns Handler must be mounted on.
var Patterns = []string{"/ui/", "/api/ops/"}

// idleAfter is how long the sampler keeps going after the last ops API
// request: an api nobody watches does not poll PostgreSQL and Kafka.
const idleAfter = 10 * time.Minute

// Run samples the operations figures every SampleInterval while the ops API
// is in use (until idleAfter without a request) until ctx is cancelled, then
// stops a running drill and closes the connections.
func (c *Console) Run(ctx context.Context) error {
	defer c.close()
	t := time.NewTicker(c.cfg.SampleInterval)
	defer t.Stop()
	s := newSampler(c)
	for {
		if c.active() {
			s.sample(ctx)
			select {
			case <-ctx.Done():
				c.drills.shutdown()
				return nil
			case <-t.C:
			}
			continue
		}
		s.reset()
		select {
		case <-ctx.Done():
			c.drills.shutdown()
			return nil
		case <-c.wake:
		}
	}
}

// touch records an ops API request and wakes an idle sampler.
func (c *Console) touch() {
	c.lastUse.Store(time.Now().UnixNano())
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Console) active() bool {
	return time.Since(time.Unix(0, c.lastUse.Load())) < idleAfter
}

func (c *Console) close() {
	c.producerMu.Lock()
	if c.producer != nil {
		c.producer.Close()
	}
	c.producerMu.Unlock()
	c.dlqs.close()
	c.admin.Close()
	c.kafka.Close()
	c.pool.Close()
}

func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /ui/", assetHandler())
	mux.HandleFunc("GET /api/ops/overview", c.handleOverview)
	mux.HandleFunc("GET /api/ops/orders/{id}", c.handleTrace)
	mux.HandleFunc("GET /api/ops/metrics", c.handleMetrics)
	mux.HandleFunc("GET /api/ops/dlq", c.handleDLQ)
	mux.HandleFunc("POST /api/ops/dlq/replay", c.handleReplay)
	if c.cfg.EnableDrills {
		mux.HandleFunc("GET /api/ops/drills", c.drills.handleList)
		mux.HandleFunc("POST /api/ops/drills/{name}/runs", c.drills.handleStart)
		mux.HandleFunc("GET /api/ops/drills/runs/{id}", c.drills.handleGet)
		mux.HandleFunc("POST /api/ops/drills/runs/{id}/continue", c.drills.handleContinue)
	}
	mux.HandleFunc("/api/ops/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "no such ops endpoint")
	})
	return requireToken(c.cfg.OpsToken, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/ops/") {
			c.touch()
		}
		mux.ServeHTTP(w, r)
	}))
}

// requireToken guards /api/ops/ with a bearer token when token is set. The
// front end under /ui/ stays public: it asks for the token itself.
func requireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/ops/") &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="eventforge-ops"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// overview is what the front end needs to draw itself.
type overview struct {
	Topic        string            `json:"topic"`
	DLQTopic     string            `json:"dlq_topic"`
	Slot         string            `json:"slot"`
	Consumers    map[string]string `json:"consumers"`
	DrillsOn     bool              `json:"drills_enabled"`
	Supervised   bool              `json:"supervised"`
	Components   []Component       `json:"components"`
	SampleMillis int64             `json:"sample_interval_ms"`
	// Alerts are the thresholds of the shipped alert rules on the charts'
	// figures, by figure (figureAlerts).
	Alerts map[string]alertLine `json:"alerts"`
}

func (c *Console) handleOverview(w http.ResponseWriter, _ *http.Request) {
	o := overview{
		Topic: c.cfg.Topic, DLQTopic: c.cfg.dlqTopic(), Slot: c.cfg.Slot, Consumers: c.cfg.Consumers,
		DrillsOn: c.cfg.EnableDrills, Supervised: c.procs != nil, Components: []Component{},
		SampleMillis: c.cfg.SampleInterval.Milliseconds(), Alerts: figureAlerts(),
	}
	if c.procs != nil {
		o.Components = c.procs.Components()
	}
	writeJSON(w, http.StatusOK, o)
}

func (c *Console) replayProducer() (*dlq.Producer, error) {
	c.producerMu.Lock()
	defer c.producerMu.Unlock()
	if c.producer == nil {
		p, err := dlq.NewProducer(dlq.ReplayConfig(c.cfg.KafkaBrokers), nil)
		if err != nil {
			return nil, err
		}
		c.producer = p
	}
	return c.producer, nil
}

// errNotFound is returned for an unknown order, record or run.
var errNotFound = errors.New("not found")
