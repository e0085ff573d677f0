package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/eventforge/eventforge/internal/localstack"
	"github.com/eventforge/eventforge/internal/logging"
)

type stackCmd struct {
	Up      stackUpCmd      `cmd:"" help:"Start PostgreSQL and Kafka (idempotent) and create the topics."`
	Down    stackDownCmd    `cmd:"" help:"Stop the monitor's Prometheus, Kafka and every PostgreSQL of the state dir (all versions)."`
	Status  stackStatusCmd  `cmd:"" help:"Show whether PostgreSQL, Kafka and the monitor's Prometheus run, with their endpoints."`
	Monitor stackMonitorCmd `cmd:"" help:"Start a Prometheus with the shipped jobs and alert rules that scrapes what eventforge dev runs on this state dir (idempotent); print its URL."`
}

// stateDirFlag names the stack's state dir.
type stateDirFlag struct {
	StateDir string `name:"state-dir" help:"Where the stack keeps its data (default /var/tmp/eventforge-<hash of checkout>)."`
}

type stackFlags struct {
	stateDirFlag
	PGVersion int `name:"pg-version" help:"PostgreSQL major version: 15 (Debian's package), 16, 17 or 18 (pinned npm packages). Each version has its own data dir and port (15: 54329, N: 54300+N); Kafka is shared." default:"${pg_default}" enum:"${pg_versions}"`
}

func (f stackFlags) config() localstack.Config {
	return localstack.Config{StateDir: f.StateDir, PGVersion: f.PGVersion}
}

type stackUpCmd struct {
	stackFlags
	PrintStarted bool `name:"print-started" help:"Print only the services this call started (space-separated) on stdout."`
}

func (c *stackUpCmd) Run(env *runEnv) error {
	res, err := localstack.Up(env.ctx, c.config(), env.logger)
	if err != nil {
		return err
	}
	if c.PrintStarted {
		var started []string
		if res.StartedPostgres {
			started = append(started, "postgres")
		}
		if res.StartedKafka {
			started = append(started, "kafka")
		}
		fmt.Println(strings.Join(started, " "))
		return nil
	}
	fmt.Printf("PostgreSQL %d  %s\nKafka          %s\n", res.PGVersion, res.PostgresDSN, res.KafkaBootstrap)
	return nil
}

type stackDownCmd struct {
	stackFlags
	PostgresOnly bool `name:"postgres-only" help:"Stop only the PostgreSQL server of --pg-version; Kafka and other versions keep running."`
}

func (c *stackDownCmd) Run(env *runEnv) error {
	if c.PostgresOnly {
		return localstack.DownPostgres(env.ctx, c.config(), env.logger)
	}
	return localstack.Down(env.ctx, c.config(), env.logger)
}

type stackStatusCmd struct {
	stackFlags
	JSON bool `name:"json" help:"Print JSON."`
}

func (c *stackStatusCmd) Run(env *runEnv) error {
	rep, err := localstack.Status(env.ctx, c.config())
	if err != nil {
		return err
	}
	rep.AdminDSN = logging.MaskURL(rep.AdminDSN)
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	state := func(s localstack.ServiceStatus) string {
		if !s.Running {
			return "stopped"
		}
		return fmt.Sprintf("running (pid %d, rss %d MiB)", s.PID, s.RSSBytes>>20)
	}
	fmt.Printf("state dir      %s\nPostgreSQL %d  %s  %s\nKafka          %s  %s\nPrometheus     %s  %s\n", rep.StateDir,
		rep.PGVersion, state(rep.Postgres), rep.PostgresDSN, state(rep.Kafka), rep.KafkaBootstrap, state(rep.Prometheus), rep.PrometheusURL)
	return nil
}

type stackMonitorCmd struct {
	stateDirFlag
}

// Run starts the monitor (localstack.Monitor) and prints where it answers.
// eventforge dev writes its components' metrics addresses where the
// monitor reads them, so either may start first.
func (c *stackMonitorCmd) Run(env *runEnv) error {
	res, err := localstack.Monitor(env.ctx, localstack.Config{StateDir: c.StateDir}, env.logger)
	if err != nil {
		return err
	}
	fmt.Printf("Prometheus     %[1]s   (alerts %[1]s/alerts, targets %[1]s/targets)\n", res.URL)
	fmt.Printf("               rules and data in %s; `eventforge stack down` (make stop) stops it\n", res.Dir)
	return nil
}
