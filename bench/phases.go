package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/eventforge/eventforge/internal/freeport"
	"github.com/eventforge/eventforge/internal/kafkaread"
	"github.com/eventforge/eventforge/schema"
)

// runner holds the state of one run across its phases.
type runner struct {
	cfg    Config
	binary string // the eventforge binary the components run from
	sz     sizes
	env    *env
	logDir string
	logger *slog.Logger
	res    *Results

	api, cdc, consumer *child
	grpcAddr, httpAddr string
}

// loadClient connects the load generator to the api over gRPC (4
// connections), then settles the database, so that the load that follows
// starts on fresh statistics; the caller closes the connections.
func (r *runner) loadClient(ctx context.Context) (creator, func(), error) {
	create, closeGRPC, err := grpcCreator(r.grpcAddr, 4)
	if err != nil {
		return nil, nil, err
	}
	if err := r.settle(ctx); err != nil {
		closeGRPC()
		return nil, nil, err
	}
	return create, closeGRPC, nil
}

// settle vacuums and analyzes the benchmark's database, then checkpoints,
// so that a phase starts with fresh planner statistics and is not measured
// across a checkpoint the previous phase's writes made due (as pgbench
// vacuums before a run).
func (r *runner) settle(ctx context.Context) error {
	return settleDB(ctx, r.env.pool, r.env.endpoints.AdminDSN)
}

// children maps the pids of the running components to their CPU groups.
func (r *runner) children() map[int]string {
	m := map[int]string{}
	for name, c := range map[string]*child{"api": r.api, "cdc": r.cdc, "consumer": r.consumer} {
		if c != nil && c.Running() {
			m[c.Cmd.Process.Pid] = name
		}
	}
	return m
}

// cpuFrom returns a function that records the cores each group used from
// now until it is called, under phase.
func (r *runner) cpuFrom(phase string) func() {
	start := sampleCPU(r.children())
	return func() {
		r.res.CPU = append(r.res.CPU, coresBetween(phase, start, sampleCPU(r.children())))
	}
}

func (r *runner) stopAll() {
	for _, c := range []*child{r.api, r.cdc, r.consumer} {
		if c != nil {
			c.stop()
		}
	}
}

// pgLimitPhase measures PostgreSQL's limit for the order transaction on a
// database of its own, so its rows do not join the backlog.
func (r *runner) pgLimitPhase(ctx context.Context) error {
	name := r.env.database + "_pg"
	admin, err := pgx.Connect(ctx, r.env.endpoints.AdminDSN)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s OWNER eventforge", pgx.Identifier{name}.Sanitize())); err != nil {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	defer func() {
		_, _ = admin.Exec(context.WithoutCancel(ctx), fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{name}.Sanitize()))
	}()
	dsn := strings.Replace(r.env.dsn, "/"+r.env.database+"?", "/"+name+"?", 1)
	if err := schema.Migrate(ctx, dsn, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return err
	}
	if err := warmSchema(ctx, dsn, r.logDir); err != nil {
		return err
	}
	done := r.cpuFrom("postgres limit (pgbench: reaped)")
	r.res.PGLimit, err = pgLimit(ctx, dsn, r.logDir, r.sz.pgClients, r.sz.pgDuration)
	done()
	return err
}

// apiPhase runs CreateOrder closed-loop over gRPC, then over REST, with the
// reader and consumer stopped; the orders it creates start the backlog.
func (r *runner) apiPhase(ctx context.Context) error {
	var err error
	if r.grpcAddr, err = freeport.Addr(); err != nil {
		return err
	}
	if r.httpAddr, err = freeport.Addr(); err != nil {
		return err
	}
	r.api, err = startChild(r.binary, r.logDir, "api", r.cfg.Profile, "api", "--database-url", r.env.dsn,
		"--grpc-addr", r.grpcAddr, "--http-addr", r.httpAddr, "--log-level", "warn")
	if err != nil {
		return err
	}
	if err := waitFor(ctx, time.Minute, "api ready", func() (bool, error) {
		if !r.api.Running() {
			return false, fmt.Errorf("api exited; see %s", r.api.Log)
		}
		resp, err := http.Get("http://" + r.httpAddr + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		return err
	}
	create, closeGRPC, err := r.loadClient(ctx)
	if err != nil {
		return err
	}
	defer closeGRPC()
	// The api's connections plan their statements on first use. On the
	// fresh database the orders table is empty then, and the order_items
	// foreign key check keeps a sequential scan of orders until the
	// table's statistics change (docs/bench.md). Orders first, then an
	// ANALYZE (settle), which replans them: the phase measures the steady
	// state, not a new schema's first minute.
	closedLoop(ctx, create, r.sz.apiClients, r.sz.apiWarmup, "bench-api-warmup")
	if err := r.settle(ctx); err != nil {
		return err
	}
	profiled, done := r.api.profileCPU(r.logDir, "api-grpc", r.sz.apiDuration-time.Second), r.cpuFrom("api gRPC")
	r.res.APIGRPC = closedLoop(ctx, create, r.sz.apiClients, r.sz.apiDuration, "bench-api-grpc")
	done()
	profiled()
	profiled, done = r.api.profileCPU(r.logDir, "api-rest", r.sz.apiDuration-time.Second), r.cpuFrom("api REST")
	r.res.APIREST = closedLoop(ctx, restCreator(r.httpAddr, r.sz.apiClients), r.sz.apiClients, r.sz.apiDuration, "bench-api-rest")
	done()
	profiled()
	r.api.profileHeap(r.logDir, "api")
	r.res.APIGRPCCPU = r.res.cpuPerOrder("api gRPC", "api", r.res.APIGRPC.PerSecond)
	r.res.APIRESTCPU = r.res.cpuPerOrder("api REST", "api", r.res.APIREST.PerSecond)
	if limit := r.res.PGLimit.BestCommitsPerSec; limit > 0 {
		r.res.GRPCRatio = r.res.APIGRPC.PerSecond / limit
		r.res.RESTRatio = r.res.APIREST.PerSecond / limit
	}
	if u, err := r.api.sample(); err == nil {
		r.res.APIPeakRSS = u.PeakRSSBytes
	}
	return nil
}

func (r *runner) countOutbox(ctx context.Context) (int, error) {
	var n int
	err := r.env.pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n)
	return n, err
}

func (r *runner) currentWAL(ctx context.Context) (pglogrepl.LSN, error) {
	var s string
	if err := r.env.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(s)
}

func (r *runner) slotLag(ctx context.Context) (confirmed pglogrepl.LSN, lag int64, err error) {
	st, err := schema.ReadSlotStatus(ctx, r.env.pool, r.env.slot)
	if err != nil {
		return 0, 0, err
	}
	confirmed, err = pglogrepl.ParseLSN(st.ConfirmedFlushLSN)
	return confirmed, st.LagBytes, err
}

// drainPhase tops the backlog up to its size with pgbench (one order
// transaction per event, as the API commits them), then starts the reader
// and times it until the slot confirmed everything.
func (r *runner) drainPhase(ctx context.Context) error {
	have, err := r.countOutbox(ctx)
	if err != nil {
		return err
	}
	if err := commitOrders(ctx, r.env.dsn, r.logDir, r.sz.backlog-have); err != nil {
		return fmt.Errorf("committing the backlog: %w", err)
	}
	events, err := r.countOutbox(ctx)
	if err != nil {
		return err
	}
	if err := r.env.warmKafka(ctx, 100_000); err != nil {
		return err
	}
	if err := r.settle(ctx); err != nil {
		return err
	}
	target, err := r.currentWAL(ctx)
	if err != nil {
		return err
	}
	if err := copySlot(ctx, r.env.pool, r.env.slot, recvlogicalSlot(r.env.slot)); err != nil {
		return err
	}
	start, done := time.Now(), r.cpuFrom("cdc drain")
	r.cdc, err = startChild(r.binary, r.logDir, "cdc", r.cfg.Profile, "cdc", "--database-url", r.env.dsn, "--kafka-brokers", r.env.endpoints.KafkaBootstrap,
		"--slot", r.env.slot, "--topic", "order="+r.env.topic, "--log-level", "warn")
	if err != nil {
		return err
	}
	profiled := r.cdc.profileCPU(r.logDir, "drain", 10*time.Second)
	defer profiled()
	err = waitFor(ctx, 10*time.Minute, "slot confirmed the backlog", func() (bool, error) {
		if !r.cdc.Running() {
			return false, fmt.Errorf("cdc exited; see %s", r.cdc.Log)
		}
		confirmed, _, err := r.slotLag(ctx)
		return err == nil && confirmed >= target, nil
	})
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	done()
	u, _ := r.cdc.sample()
	r.cdc.profileHeap(r.logDir, "drain")
	r.res.Drain = drainResult{Events: events, Seconds: secs, EventsPerSec: float64(events) / secs, PeakRSSBytes: u.PeakRSSBytes}

	// The same backlog through PostgreSQL's own client, after the reader,
	// so the reader never streams WAL this run already read.
	done = r.cpuFrom("pg_recvlogical drain")
	limitSecs, err := recvlogicalDrain(ctx, r.env.pool, r.env.dsn, recvlogicalSlot(r.env.slot), target)
	done()
	if err != nil {
		return err
	}
	r.res.Drain.RecvlogicalSeconds = limitSecs
	r.res.Drain.RecvlogicalPerSec = float64(events) / limitSecs
	return nil
}

// consumerSupportsBatching reports whether `consumer --help` of binary
// lists --batch-size.
func consumerSupportsBatching(binary string) bool {
	out, _ := exec.Command(binary, "consumer", "--help").CombinedOutput()
	return strings.Contains(string(out), "--batch-size")
}

func (r *runner) startConsumer(group string, batch int) (*child, error) {
	args := []string{"consumer", "--database-url", r.env.dsn, "--kafka-brokers", r.env.endpoints.KafkaBootstrap,
		"--group", group, "--topics", r.env.topic, "--commit-interval", "200ms", "--log-level", "warn"}
	if batch > 0 {
		args = append(args, "--batch-size", strconv.Itoa(batch))
	}
	return startChild(r.binary, r.logDir, "consumer-"+strings.TrimPrefix(group, r.env.group+"-"), r.cfg.Profile, args...)
}

// timeApply starts a consumer group on the full topic and times it until
// its committed offsets reach the end.
func (r *runner) timeApply(ctx context.Context, group string, batch int) (applyRun, *child, error) {
	kr, err := kafkaread.New(r.env.endpoints.KafkaBootstrap)
	if err != nil {
		return applyRun{}, nil, err
	}
	defer kr.Close()
	ends, err := kr.EndOffsets(r.env.topic)
	if err != nil {
		return applyRun{}, nil, err
	}
	total := 0
	for _, e := range ends {
		total += int(e)
	}
	start, done := time.Now(), r.cpuFrom(fmt.Sprintf("consumer apply, batch %d", max(batch, 1)))
	c, err := r.startConsumer(group, batch)
	if err != nil {
		return applyRun{}, nil, err
	}
	profiled := c.profileCPU(r.logDir, "apply", 10*time.Second)
	defer profiled()
	err = waitCommitted(ctx, kr, c, group, r.env.topic, ends)
	secs := time.Since(start).Seconds()
	r.consumer = c
	done()
	run := applyRun{BatchSize: max(batch, 1), Events: total, Seconds: secs, EventsPerSec: float64(total) / secs}
	if err == nil {
		u, _ := c.sample()
		run.PeakRSSBytes = u.PeakRSSBytes
		c.profileHeap(r.logDir, "apply")
	}
	return run, c, err
}

// waitCommitted waits until the consumer c, of group, committed offsets at
// or past ends on every partition of topic; it fails if c exits first.
func waitCommitted(ctx context.Context, kr *kafkaread.Reader, c *child, group, topic string, ends map[int32]int64) error {
	return waitFor(ctx, 30*time.Minute, "consumer reached the end of "+topic, func() (bool, error) {
		if !c.Running() {
			return false, fmt.Errorf("consumer exited; see %s", c.Log)
		}
		committed, err := kr.Committed(group, topic)
		if err != nil {
			return false, nil
		}
		for p, end := range ends {
			if committed[p] < end {
				return false, nil
			}
		}
		return true, nil
	})
}

// applyPhase times the consumer over the whole backlog with batching off,
// resets the business state, and times it again with batching on. The last
// consumer keeps running for the end-to-end phase.
func (r *runner) applyPhase(ctx context.Context) error {
	batching := consumerSupportsBatching(r.binary)
	off := 0
	if batching {
		off = 1
	}
	run, c, err := r.timeApply(ctx, r.env.group+"-off", off)
	r.consumer = c
	if err != nil {
		return err
	}
	r.res.Apply.Off = run
	if !batching {
		r.logger.Warn("consumer has no --batch-size option; batching-on figure not measured")
		return nil
	}
	r.consumer.stop()
	if _, err := r.env.pool.Exec(ctx, `TRUNCATE processed_events, shipments; UPDATE orders SET status = 'created' WHERE status = 'processed'`); err != nil {
		return fmt.Errorf("resetting business state: %w", err)
	}
	if err := r.settle(ctx); err != nil {
		return err
	}
	run, c, err = r.timeApply(ctx, r.env.group+"-on", r.sz.batchSize)
	r.consumer = c
	if err != nil {
		return err
	}
	r.res.Apply.On, r.res.Apply.OnMeasured = run, true
	return nil
}

func latencies(d []time.Duration) latency {
	if len(d) == 0 {
		return latency{}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return latency{P50: percentile(d, 0.50), P95: percentile(d, 0.95), P99: percentile(d, 0.99), Max: d[len(d)-1]}
}
