package localstack

import "path/filepath"

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
	}
}
