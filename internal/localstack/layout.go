package localstack

import (
	"path/filepath"
	"strconv"
)

// layout names every file and directory the stack keeps under its state dir.
type layout struct {
	root          string
	lock          string // flock(2) target serialising Up and Down
	adminPassword string // superuser password, written when the cluster is created

	pgDir       string // owned by the user running PostgreSQL
	pgData      string
	pgRun       string // unix socket directory
	pgLog       string // logging_collector output
	pgCtlLog    string // pg_ctl -l: output before the collector starts
	pgReady     string // marker: initdb and first configuration completed
	pgConfName  string // included from postgresql.conf
	pgPwFile    string // transient superuser password file for initdb
	pgHBA       string
	pgPIDFile   string
	pgVersionFn string

	kafkaDir    string
	kafkaPom    string
	kafkaLibs   string
	kafkaData   string // log.dirs
	kafkaLogs   string // kafka.logs.dir (log4j2 files)
	kafkaOut    string // broker stdout and stderr
	kafkaPID    string
	kafkaProps  string
	kafkaLog4j  string
	kafkaFormat string // marker in kafkaData written by StorageTool

	promDir  string // Prometheus's configuration, rules, targets and data (promserver.Write)
	promPID  string
	promAddr string // the host:port it serves on
	promLog  string // its stdout and stderr
}

// newLayoutFor is the layout of root with the cluster of a PostgreSQL major
// version: <root>/pg for 15 (the layout older stacks already have),
// <root>/pg<N> for the others.
func newLayoutFor(root string, major int) layout {
	l := newLayout(root)
	if major != DefaultPGVersion {
		l = l.withPGDir(filepath.Join(root, "pg"+strconv.Itoa(major)))
	}
	return l
}

// withPGDir returns l with its PostgreSQL files under dir.
func (l layout) withPGDir(pg string) layout {
	data := filepath.Join(pg, "data")
	l.pgDir = pg
	l.pgData = data
	l.pgRun = filepath.Join(pg, "run")
	l.pgLog = filepath.Join(pg, "log")
	l.pgCtlLog = filepath.Join(pg, "pg_ctl.log")
	l.pgReady = filepath.Join(pg, "initialized")
	l.pgPwFile = filepath.Join(pg, "pwfile")
	l.pgHBA = filepath.Join(data, "pg_hba.conf")
	l.pgPIDFile = filepath.Join(data, "postmaster.pid")
	l.pgVersionFn = filepath.Join(data, "PG_VERSION")
	return l
}

// pgDirs returns every PostgreSQL directory under root (<root>/pg*: each
// version's cluster and standbys), whether or not it runs.
func pgDirs(root string) []string {
	dirs, _ := filepath.Glob(filepath.Join(root, "pg*"))
	var out []string
	for _, d := range dirs {
		if fileExists(filepath.Join(d, "data")) {
			out = append(out, d)
		}
	}
	return out
}

func newLayout(root string) layout {
	pg := filepath.Join(root, "pg")
	data := filepath.Join(pg, "data")
	kafka := filepath.Join(root, "kafka")
	kdata := filepath.Join(kafka, "data")
	return layout{
		root:          root,
		lock:          filepath.Join(root, "lock"),
		adminPassword: filepath.Join(root, "admin.password"),

		pgDir:       pg,
		pgData:      data,
		pgRun:       filepath.Join(pg, "run"),
		pgLog:       filepath.Join(pg, "log"),
		pgCtlLog:    filepath.Join(pg, "pg_ctl.log"),
		pgReady:     filepath.Join(pg, "initialized"),
		pgConfName:  "eventforge.conf",
		pgPwFile:    filepath.Join(pg, "pwfile"),
		pgHBA:       filepath.Join(data, "pg_hba.conf"),
		pgPIDFile:   filepath.Join(data, "postmaster.pid"),
		pgVersionFn: filepath.Join(data, "PG_VERSION"),

		kafkaDir:    kafka,
		kafkaPom:    filepath.Join(kafka, "pom.xml"),
		kafkaLibs:   filepath.Join(kafka, "libs"),
		kafkaData:   kdata,
		kafkaLogs:   filepath.Join(kafka, "logs"),
		kafkaOut:    filepath.Join(kafka, "kafka.out"),
		kafkaPID:    filepath.Join(kafka, "kafka.pid"),
		kafkaProps:  filepath.Join(kafka, "server.properties"),
		kafkaLog4j:  filepath.Join(kafka, "log4j2.xml"),
		kafkaFormat: filepath.Join(kdata, "meta.properties"),

		promDir:  MonitorDir(root),
		promPID:  filepath.Join(MonitorDir(root), "prometheus.pid"),
		promAddr: filepath.Join(MonitorDir(root), "address"),
		promLog:  filepath.Join(MonitorDir(root), "prometheus.log"),
	}
}
