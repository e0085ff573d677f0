package localstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/eventforge/eventforge/internal/filelock"
	"github.com/eventforge/eventforge/internal/pgbin"
)

// Result is what Up did.
type Result struct {
	Endpoints
	// StartedPostgres is true when this call started PostgreSQL, false when
	// it was already running.
	StartedPostgres bool
	// StartedKafka is true when this call started Kafka, false when it was
	// already running.
	StartedKafka bool
}

// Up makes sure PostgreSQL and Kafka run for cfg and the configured topics
// exist. Zero fields of cfg take their defaults. Missing system packages
// (PostgreSQL 15 server, Java 17+, Maven) are installed with apt-get when the
// process is root; otherwise the error names the command to run. The server
// programs of PostgreSQL 16–18 are installed on first use (internal/pgbin).
// It is idempotent, and safe to call from several processes at
// once: callers are serialised by a lock in the state dir. The services keep
// running after the calling process exits; Down stops them.
func Up(ctx context.Context, cfg Config, log *slog.Logger) (Result, error) {
	begin := time.Now()
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return Result{}, fmt.Errorf("validating local stack config: %w", err)
	}
	l := newLayoutFor(cfg.StateDir, cfg.PGVersion)
	log = log.With("state_dir", cfg.StateDir)
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return Result{}, fmt.Errorf("creating state dir: %w", err)
	}
	unlock, err := filelock.Lock(ctx, l.lock, "state dir", log)
	if err != nil {
		return Result{}, err
	}
	defer unlock()

	t, err := ensurePrerequisites(ctx, realHost(log), log)
	if err != nil {
		return Result{}, fmt.Errorf("checking prerequisites: %w", err)
	}
	dist, err := pgbin.Ensure(ctx, cfg.PGVersion, "", log)
	if err != nil {
		return Result{}, fmt.Errorf("finding postgresql %d: %w", cfg.PGVersion, err)
	}

	// Refuse before starting anything when a port is taken by a stranger.
	if !alive(readPID(l.pgPIDFile)) {
		if err := pgPortFree(cfg, l); err != nil {
			return Result{}, fmt.Errorf("starting postgres: %w", err)
		}
	}
	if !cfg.PostgresOnly && kafkaPID(l) == 0 {
		if err := kafkaPortsFree(cfg, l); err != nil {
			return Result{}, fmt.Errorf("starting kafka: %w", err)
		}
	}

	var res Result
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		started, err := upPostgres(gctx, cfg, l, dist, log)
		res.StartedPostgres = started
		if err != nil {
			return fmt.Errorf("starting postgres: %w", err)
		}
		return nil
	})
	if !cfg.PostgresOnly {
		g.Go(func() error {
			started, err := upKafka(gctx, cfg, l, t, log)
			res.StartedKafka = started
			if err != nil {
				return fmt.Errorf("starting kafka: %w", err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	pw, err := adminPassword(l)
	if err != nil {
		return res, err
	}
	res.Endpoints = cfg.endpoints(pw)
	if cfg.PostgresOnly {
		res.KafkaBootstrap = ""
	} else if err := ensureTopics(ctx, res.KafkaBootstrap, cfg.Topics, log); err != nil {
		return res, fmt.Errorf("ensuring topics: %w", err)
	}
	log.Info("local stack up",
		"pg_version", cfg.PGVersion, "pg_port", cfg.PGPort, "kafka_bootstrap", res.KafkaBootstrap,
		"started_postgres", res.StartedPostgres, "started_kafka", res.StartedKafka,
		"elapsed_ms", time.Since(begin).Milliseconds())
	return res, nil
}

// Down stops the Prometheus of Monitor, Kafka (SIGTERM, then SIGKILL after
// 30 s) and every PostgreSQL server of cfg's state dir, whatever its
// version (fast shutdown), standbys included. Services that are not running
// are no error. State is kept: the next Up starts from it.
func Down(ctx context.Context, cfg Config, log *slog.Logger) error {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("validating local stack config: %w", err)
	}
	l := newLayout(cfg.StateDir)
	log = log.With("state_dir", cfg.StateDir)
	if !fileExists(cfg.StateDir) {
		return nil
	}
	unlock, err := filelock.Lock(ctx, l.lock, "state dir", log)
	if err != nil {
		return err
	}
	defer unlock()
	errs := []error{stopPrometheus(ctx, l, log)}
	kerr := stopKafka(ctx, l, log)
	for _, dir := range pgDirs(cfg.StateDir) {
		errs = append(errs, stopPostgres(ctx, l.withPGDir(dir), log))
	}
	if kerr != nil {
		return kerr
	}
	return errors.Join(errs...)
}

// DownPostgres stops only the PostgreSQL server of cfg's version in the
// state dir; Kafka and the other versions keep running.
func DownPostgres(ctx context.Context, cfg Config, log *slog.Logger) error {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("validating local stack config: %w", err)
	}
	if !fileExists(cfg.StateDir) {
		return nil
	}
	l := newLayoutFor(cfg.StateDir, cfg.PGVersion)
	unlock, err := filelock.Lock(ctx, l.lock, "state dir", log.With("state_dir", cfg.StateDir))
	if err != nil {
		return err
	}
	defer unlock()
	return stopPostgres(ctx, l, log)
}

// StatusReport describes the stack of one state dir.
type StatusReport struct {
	Endpoints
	// StateDir is the directory the stack keeps its state in.
	StateDir string
	// Postgres is the PostgreSQL server of the configured version (the
	// postmaster process); Endpoints.PGVersion names the version.
	Postgres ServiceStatus
	// Kafka is the broker process.
	Kafka ServiceStatus
	// Prometheus is the server Monitor started; PrometheusURL is where it
	// answers while it runs.
	Prometheus    ServiceStatus
	PrometheusURL string
}

// ServiceStatus describes one service.
type ServiceStatus struct {
	// Running is true when the process lives and answers on its port.
	Running bool
	// PID is the process id from the service's pid file, 0 when it has none
	// or the process is gone.
	PID int
	// RSSBytes is the resident memory of the process (children excluded).
	RSSBytes int64
	// LogFile is the service's main log.
	LogFile string
}

// Status reports whether the services of cfg's state dir run. It takes no
// lock and changes nothing.
func Status(ctx context.Context, cfg Config) (StatusReport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return StatusReport{}, fmt.Errorf("validating local stack config: %w", err)
	}
	l := newLayoutFor(cfg.StateDir, cfg.PGVersion)
	pw, _ := os.ReadFile(l.adminPassword)
	rep := StatusReport{
		Endpoints:  cfg.endpoints(strings.TrimSpace(string(pw))),
		StateDir:   cfg.StateDir,
		Postgres:   ServiceStatus{LogFile: l.pgLog + "/postgresql.log"},
		Kafka:      ServiceStatus{LogFile: l.kafkaLogs + "/server.log"},
		Prometheus: ServiceStatus{LogFile: l.promLog},
	}
	if pid := readPID(l.pgPIDFile); isPostmasterOf(pid, l) {
		rep.Postgres.PID = pid
		rep.Postgres.RSSBytes = rssBytes(pid)
		rep.Postgres.Running = pingPG(ctx, rep.AdminDSN) == nil
	}
	if pid := kafkaPID(l); pid != 0 {
		rep.Kafka.PID = pid
		rep.Kafka.RSSBytes = rssBytes(pid)
		rep.Kafka.Running = answers(cfg.KafkaPort, time.Second)
	}
	if pid := prometheusPID(l); pid != 0 {
		addr, _ := os.ReadFile(l.promAddr)
		rep.Prometheus.PID, rep.Prometheus.RSSBytes = pid, rssBytes(pid)
		_, port, _ := strings.Cut(strings.TrimSpace(string(addr)), ":")
		if p, err := strconv.Atoi(port); err == nil && answers(p, time.Second) {
			rep.Prometheus.Running, rep.PrometheusURL = true, "http://"+strings.TrimSpace(string(addr))
		}
	}
	return rep, nil
}
