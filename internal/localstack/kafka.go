package localstack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/eventforge/eventforge/deploy/local"
)

const (
	// kafkaClusterID is the fixed cluster id the storage is formatted with:
	// base64url("eventforgelocal1") without padding, 22 characters.
	kafkaClusterID = "ZXZlbnRmb3JnZWxvY2FsMQ"
	// kafkaMain identifies the broker process on its command line.
	kafkaMain = "kafka.Kafka"
	// dependencyPlugin resolves the broker class path from the pom.
	dependencyPlugin = "org.apache.maven.plugins:maven-dependency-plugin:3.7.1:copy-dependencies"
	// pomHashFile, inside the libs dir, records the pom the jars came from.
	pomHashFile = ".pom.sha256"

	kafkaReadyTimeout = 120 * time.Second
	kafkaStopTimeout  = 30 * time.Second
)

// kafkaJVMArgs are the JVM options before the class path.
var kafkaJVMArgs = []string{"-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true"}

// upKafka starts the broker unless it already runs and waits until it
// answers metadata requests. It reports whether it started the broker.
func upKafka(ctx context.Context, cfg Config, l layout, t tools, log *slog.Logger) (bool, error) {
	for _, d := range []string{l.kafkaDir, l.kafkaData, l.kafkaLogs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return false, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	bootstrap := cfg.endpoints("").KafkaBootstrap
	if pid := kafkaPID(l); pid != 0 {
		log.Info("kafka process found, waiting for it to answer", "pid", pid, "kafka_port", cfg.KafkaPort)
		if err := waitKafka(ctx, bootstrap, pid, kafkaReadyTimeout, log); err != nil {
			return false, withLogs(fmt.Errorf("waiting for running kafka (pid %d): %w", pid, err), l.kafkaOut, l.kafkaLogs+"/server.log")
		}
		log.Info("kafka already running", "pid", pid, "kafka_port", cfg.KafkaPort)
		return false, nil
	}
	if err := kafkaPortsFree(cfg, l); err != nil {
		return false, err
	}
	if err := resolveKafkaJars(ctx, l, t.mvn, log); err != nil {
		return false, fmt.Errorf("resolving kafka jars: %w", err)
	}
	if err := writeKafkaConfig(cfg, l); err != nil {
		return false, err
	}
	if err := formatKafkaStorage(ctx, l, t.java, log); err != nil {
		return false, fmt.Errorf("formatting kafka storage: %w", err)
	}
	begin := time.Now()
	pid, err := startKafka(l, t.java)
	if err != nil {
		return false, fmt.Errorf("starting kafka: %w", err)
	}
	if err := waitKafka(ctx, bootstrap, pid, kafkaReadyTimeout, log); err != nil {
		return true, withLogs(fmt.Errorf("starting kafka (pid %d): %w", pid, err), l.kafkaOut, l.kafkaLogs+"/server.log")
	}
	log.Info("kafka started", "pid", pid, "kafka_port", cfg.KafkaPort, "controller_port", cfg.KafkaControllerPort,
		"log_file", l.kafkaLogs+"/server.log", "elapsed_ms", time.Since(begin).Milliseconds())
	return true, nil
}

// kafkaPortsFree reports an error when a port the broker needs is taken.
func kafkaPortsFree(cfg Config, l layout) error {
	for _, p := range []int{cfg.KafkaPort, cfg.KafkaControllerPort} {
		if err := portFree(p); err != nil {
			return fmt.Errorf("port %d on 127.0.0.1 is in use by a process that is not this stack's broker (state dir %s): %w", p, l.root, err)
		}
	}
	return nil
}

// kafkaPID returns the pid of this state dir's live broker, or 0.
func kafkaPID(l layout) int {
	pid := readPID(l.kafkaPID)
	if !alive(pid) {
		return 0
	}
	cl := cmdline(pid)
	if !strings.Contains(cl, kafkaMain) || !strings.Contains(cl, l.kafkaProps) {
		return 0 // the pid was reused by another process
	}
	return pid
}

// pomHash returns the hex SHA-256 of the pom content.
func pomHash(pom []byte) string {
	sum := sha256.Sum256(pom)
	return hex.EncodeToString(sum[:])
}

// resolveKafkaJars copies the broker's class path into the libs dir with
// Maven, unless it already holds the jars of the same pom.
func resolveKafkaJars(ctx context.Context, l layout, mvn string, log *slog.Logger) error {
	pom, err := local.Files.ReadFile("pom.xml")
	if err != nil {
		return fmt.Errorf("reading embedded pom.xml: %w", err)
	}
	return resolveJars(ctx, l.kafkaDir, l.kafkaLibs, pom, mvn, log)
}

// renderServerProperties renders deploy/local/server.properties for cfg.
func renderServerProperties(cfg Config, l layout) ([]byte, error) {
	return render("server.properties", map[string]string{
		"KafkaPort":      strconv.Itoa(cfg.KafkaPort),
		"ControllerPort": strconv.Itoa(cfg.KafkaControllerPort),
		"DataDir":        l.kafkaData,
	})
}

// writeKafkaConfig writes server.properties and log4j2.xml.
func writeKafkaConfig(cfg Config, l layout) error {
	props, err := renderServerProperties(cfg, l)
	if err != nil {
		return err
	}
	if err := os.WriteFile(l.kafkaProps, props, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", l.kafkaProps, err)
	}
	log4j, err := local.Files.ReadFile("log4j2.xml")
	if err != nil {
		return fmt.Errorf("reading embedded log4j2.xml: %w", err)
	}
	if err := os.WriteFile(l.kafkaLog4j, log4j, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", l.kafkaLog4j, err)
	}
	return nil
}

// javaArgs returns the java arguments that run class main with args.
func javaArgs(l layout, main string, args ...string) []string {
	out := append([]string{}, kafkaJVMArgs...)
	out = append(out,
		"-Dlog4j2.configurationFile="+l.kafkaLog4j,
		"-Dkafka.logs.dir="+l.kafkaLogs,
		"-cp", filepath.Join(l.kafkaLibs, "*"),
		main)
	return append(out, args...)
}

// formatKafkaStorage formats the log dir once with the fixed cluster id.
func formatKafkaStorage(ctx context.Context, l layout, java string, log *slog.Logger) error {
	if fileExists(l.kafkaFormat) {
		return nil
	}
	cmd := exec.CommandContext(ctx, java, javaArgs(l, "kafka.tools.StorageTool",
		"format", "-t", kafkaClusterID, "-c", l.kafkaProps, "-g")...)
	cmd.Dir = l.kafkaDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("running StorageTool: %w\n%s", err, lastLines(string(out), 20))
	}
	log.Info("kafka storage formatted", "cluster_id", kafkaClusterID, "data_dir", l.kafkaData)
	return nil
}

// startKafka starts the broker detached in its own session, with output to
// the kafka.out file, and records its pid.
func startKafka(l layout, java string) (int, error) {
	out, err := os.OpenFile(l.kafkaOut, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("opening %s: %w", l.kafkaOut, err)
	}
	defer out.Close()
	fmt.Fprintf(out, "\n=== starting kafka at %s ===\n", time.Now().UTC().Format(time.RFC3339))
	cmd := exec.Command(java, javaArgs(l, kafkaMain, l.kafkaProps)...)
	cmd.Dir = l.kafkaDir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	// Reap the broker if it exits while this process lives; the broker
	// outlives this process otherwise.
	go func() { _ = cmd.Wait() }()
	if err := os.WriteFile(l.kafkaPID, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return 0, fmt.Errorf("writing %s: %w", l.kafkaPID, err)
	}
	return pid, nil
}

// waitKafka waits until the broker answers a metadata request, failing early
// when the process exits.
func waitKafka(ctx context.Context, bootstrap string, pid int, timeout time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, portStr, _ := strings.Cut(bootstrap, ":")
	port, _ := strconv.Atoi(portStr)
	for !answers(port, 500*time.Millisecond) {
		if !alive(pid) {
			return errors.New("broker process exited")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker not listening on %s: %w", bootstrap, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	a, err := newAdmin(bootstrap, log)
	if err != nil {
		return err
	}
	defer a.close()
	for {
		md, err := a.admin.GetMetadata(nil, false, 2000)
		if err == nil && len(md.Brokers) > 0 {
			return nil
		}
		if !alive(pid) {
			return errors.New("broker process exited")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker not answering metadata requests on %s (last error: %v): %w", bootstrap, err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stopKafka stops this state dir's broker: SIGTERM to its process group,
// SIGKILL after kafkaStopTimeout. It does nothing when no broker runs.
func stopKafka(ctx context.Context, l layout, log *slog.Logger) error {
	pid := kafkaPID(l)
	if pid == 0 {
		_ = os.Remove(l.kafkaPID)
		return nil
	}
	begin := time.Now()
	if err := signalGroup(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping kafka (pid %d): %w", pid, err)
	}
	if !waitExit(ctx, pid, kafkaStopTimeout) {
		log.Warn("kafka did not stop in time, killing it", "pid", pid, "timeout_ms", kafkaStopTimeout.Milliseconds())
		if err := signalGroup(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("killing kafka (pid %d): %w", pid, err)
		}
		if !waitExit(context.WithoutCancel(ctx), pid, 10*time.Second) {
			return fmt.Errorf("killing kafka: pid %d still alive", pid)
		}
	}
	_ = os.Remove(l.kafkaPID)
	log.Info("kafka stopped", "pid", pid, "elapsed_ms", time.Since(begin).Milliseconds())
	return nil
}

// signalGroup signals the process group led by pid, or pid alone when it
// leads none.
func signalGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		err = syscall.Kill(pid, sig)
	}
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// waitExit polls until pid exits or timeout passes; it reports whether the
// process exited. A cancelled ctx ends the wait early.
func waitExit(ctx context.Context, pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for alive(pid) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}
