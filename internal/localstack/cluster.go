package localstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/eventforge/eventforge/deploy/local"
	"github.com/eventforge/eventforge/internal/freeport"
)

// ClusterConfig describes a multi-node Kafka cluster for failure tests:
// every node is a combined broker and controller on loopback, internal and
// default topics are replicated to every node with min.insync.replicas one
// less.
type ClusterConfig struct {
	// StateDir holds the cluster's class path, data and logs. Required; it
	// is not shared with the local stack.
	StateDir string
	// Nodes is the node count; default 3.
	Nodes int
	// ExternalHost, when set, gives every node a second client listener on
	// this address (a free port), advertised as such: for clients in a
	// network namespace that reach the host through it
	// (KafkaCluster.ExternalBootstrap).
	ExternalHost string
}

// KafkaCluster is a running multi-node cluster. Its nodes can be killed,
// restarted, paused and resumed to test broker loss.
type KafkaCluster struct {
	// Bootstrap lists every node's client address.
	Bootstrap string
	// ExternalBootstrap lists every node's external listener, when
	// ClusterConfig.ExternalHost is set.
	ExternalBootstrap string
	java              string
	log               *slog.Logger
	nodes             []*clusterNode
}

type clusterNode struct {
	id          int
	l           layout
	port, cport int
	external    string // host:port of the external listener, or ""
	pid         int
}

// StartKafkaCluster formats and starts the cluster and waits until every
// node is registered. Close stops it.
func StartKafkaCluster(ctx context.Context, cfg ClusterConfig, log *slog.Logger) (*KafkaCluster, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("kafka cluster: StateDir is required")
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	t, err := ensurePrerequisites(ctx, realHost(log), log)
	if err != nil {
		return nil, err
	}
	shared := newLayout(cfg.StateDir)
	if err := os.MkdirAll(shared.kafkaDir, 0o755); err != nil {
		return nil, err
	}
	if err := resolveKafkaJars(ctx, shared, t.mvn, log); err != nil {
		return nil, fmt.Errorf("resolving kafka jars: %w", err)
	}
	ports, err := freeport.Ports(3 * cfg.Nodes)
	if err != nil {
		return nil, err
	}
	c := &KafkaCluster{java: t.java, log: log}
	var voters, bootstrap, external []string
	for i := range cfg.Nodes {
		n := &clusterNode{id: i + 1, port: ports[3*i], cport: ports[3*i+1]}
		if cfg.ExternalHost != "" {
			n.external = fmt.Sprintf("%s:%d", cfg.ExternalHost, ports[3*i+2])
			external = append(external, n.external)
		}
		n.l = newLayout(filepath.Join(cfg.StateDir, fmt.Sprintf("node-%d", n.id)))
		n.l.kafkaLibs = shared.kafkaLibs
		c.nodes = append(c.nodes, n)
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", n.id, n.cport))
		bootstrap = append(bootstrap, fmt.Sprintf("127.0.0.1:%d", n.port))
	}
	c.Bootstrap = strings.Join(bootstrap, ",")
	c.ExternalBootstrap = strings.Join(external, ",")
	for _, n := range c.nodes {
		if err := n.configure(strings.Join(voters, ","), cfg.Nodes); err != nil {
			return nil, err
		}
		if err := formatKafkaStorage(ctx, n.l, t.java, log); err != nil {
			return nil, fmt.Errorf("formatting node %d: %w", n.id, err)
		}
	}
	for i := range c.nodes {
		if err := c.startNode(i); err != nil {
			c.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	for i := range c.nodes {
		if err := c.waitNode(ctx, i); err != nil {
			c.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	if err := c.waitBrokers(ctx, cfg.Nodes); err != nil {
		c.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	log.Info("kafka cluster started", "nodes", cfg.Nodes, "bootstrap", c.Bootstrap)
	return c, nil
}

func (n *clusterNode) configure(voters string, nodes int) error {
	for _, d := range []string{n.l.kafkaDir, n.l.kafkaData, n.l.kafkaLogs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	props, err := render("cluster-server.properties", map[string]string{
		"NodeID": strconv.Itoa(n.id), "KafkaPort": strconv.Itoa(n.port), "ControllerPort": strconv.Itoa(n.cport),
		"Voters": voters, "DataDir": n.l.kafkaData, "Replication": strconv.Itoa(nodes), "MinISR": strconv.Itoa(max(1, nodes-1)),
		"SessionTimeoutMS": strconv.Itoa(sessionTimeoutMS(nodes)), "External": n.external,
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.l.kafkaProps, props, 0o644); err != nil {
		return err
	}
	log4j, err := local.Files.ReadFile("log4j2.xml")
	if err != nil {
		return err
	}
	return os.WriteFile(n.l.kafkaLog4j, log4j, 0o644)
}

func (c *KafkaCluster) startNode(i int) error {
	n := c.nodes[i]
	pid, err := startKafka(n.l, c.java)
	if err != nil {
		return fmt.Errorf("starting node %d: %w", n.id, err)
	}
	n.pid = pid
	return nil
}

func (c *KafkaCluster) waitNode(ctx context.Context, i int) error {
	n := c.nodes[i]
	if err := waitKafka(ctx, fmt.Sprintf("127.0.0.1:%d", n.port), n.pid, kafkaReadyTimeout, c.log); err != nil {
		return withLogs(fmt.Errorf("node %d: %w", n.id, err), n.l.kafkaOut, n.l.kafkaLogs+"/server.log")
	}
	return nil
}

// waitBrokers waits until the cluster's metadata lists want brokers.
func (c *KafkaCluster) waitBrokers(ctx context.Context, want int) error {
	a, err := newAdmin(c.Bootstrap, c.log)
	if err != nil {
		return err
	}
	defer a.close()
	ctx, cancel := context.WithTimeout(ctx, kafkaReadyTimeout)
	defer cancel()
	for {
		md, err := a.admin.GetMetadata(nil, false, 2000)
		if err == nil && len(md.Brokers) >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d brokers: %w", want, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Nodes returns the node count.
func (c *KafkaCluster) Nodes() int { return len(c.nodes) }

// Kill SIGKILLs node i (0-based) and waits until it is gone.
func (c *KafkaCluster) Kill(i int) error {
	n := c.nodes[i]
	if err := signalGroup(n.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing node %d: %w", n.id, err)
	}
	if !waitExit(context.Background(), n.pid, 10*time.Second) {
		return fmt.Errorf("node %d (pid %d) survived SIGKILL", n.id, n.pid)
	}
	return nil
}

// Stop stops node i gracefully (SIGTERM, and SIGCONT in case it is
// paused) and waits until it exited; SIGKILL after kafkaStopTimeout.
func (c *KafkaCluster) Stop(ctx context.Context, i int) error {
	n := c.nodes[i]
	_ = signalGroup(n.pid, syscall.SIGCONT)
	if err := signalGroup(n.pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping node %d: %w", n.id, err)
	}
	if !waitExit(ctx, n.pid, kafkaStopTimeout) {
		_ = signalGroup(n.pid, syscall.SIGKILL)
		if !waitExit(context.WithoutCancel(ctx), n.pid, 10*time.Second) {
			return fmt.Errorf("node %d (pid %d) did not exit", n.id, n.pid)
		}
	}
	return nil
}

// Restart starts node i again (after Kill or Stop) and waits until it
// answers.
func (c *KafkaCluster) Restart(ctx context.Context, i int) error {
	if err := c.startNode(i); err != nil {
		return err
	}
	return c.waitNode(ctx, i)
}

// Pause stops node i with SIGSTOP: its sockets stay open but it answers
// nothing, like a hung broker.
//
// It returns once every thread of the node is stopped. The kernel stops a
// process's threads only after one of them has taken the signal, which
// waits for that thread to be scheduled: on a busy machine the broker could
// otherwise go on answering requests for a while after the signal was sent.
func (c *KafkaCluster) Pause(i int) error {
	pid := c.nodes[i].pid
	if err := signalGroup(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	return waitStopped(pid, pauseTimeout)
}

// pauseTimeout bounds how long Pause waits for the node's threads to stop.
const pauseTimeout = 30 * time.Second

// Resume continues node i after Pause.
func (c *KafkaCluster) Resume(i int) error { return signalGroup(c.nodes[i].pid, syscall.SIGCONT) }

// Close stops every node: SIGCONT (in case it is paused), SIGTERM, then
// SIGKILL after a timeout.
func (c *KafkaCluster) Close(ctx context.Context) {
	for _, n := range c.nodes {
		if n.pid == 0 || !alive(n.pid) {
			continue
		}
		_ = signalGroup(n.pid, syscall.SIGCONT)
		_ = signalGroup(n.pid, syscall.SIGTERM)
	}
	for _, n := range c.nodes {
		if n.pid == 0 {
			continue
		}
		if !waitExit(ctx, n.pid, kafkaStopTimeout) {
			_ = signalGroup(n.pid, syscall.SIGKILL)
			waitExit(context.WithoutCancel(ctx), n.pid, 10*time.Second)
		}
	}
}

// sessionTimeoutMS is broker.session.timeout.ms: short with peers, so a
// killed broker loses leadership quickly; long for a single node, which has
// nobody to hand leadership to.
func sessionTimeoutMS(nodes int) int {
	if nodes == 1 {
		return 30000
	}
	return 6000
}
