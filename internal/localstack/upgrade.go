package localstack

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/eventforge/eventforge/internal/filelock"
	"github.com/eventforge/eventforge/internal/pgbin"
)

// UpgradeConfig describes a major upgrade of a stack's PostgreSQL with
// pg_upgrade.
type UpgradeConfig struct {
	// To is the new major version; it must be newer than the stack's.
	To int
	// Link hard-links the data files into the new cluster (pg_upgrade
	// --link: fast, and the old cluster cannot be started once the new one
	// has run) instead of copying them (--copy).
	Link bool
}

// UpgradeResult is what an upgrade did.
type UpgradeResult struct {
	// Output is pg_upgrade's report (its last lines).
	Output string
	// NewDataDir is the new cluster's data directory.
	NewDataDir string
	// Elapsed is how long pg_upgrade ran.
	Elapsed time.Duration
}

// Upgrade upgrades cfg's PostgreSQL cluster (cfg.PGVersion, stopped) to
// uc.To with pg_upgrade, as docs/operations.md's runbook does: it creates
// the new cluster with the new version's initdb and the stack's settings
// (wal_level=logical and enough max_replication_slots, which pg_upgrade
// needs to carry logical slots from 17 on), then runs pg_upgrade with the
// full installations of both versions (pgbin.EnsureTools), on the stack's
// port and over a private socket. Only after pg_upgrade succeeded is the new
// cluster marked ready: the next Up of a Config with PGVersion uc.To starts
// it. The old cluster stays in its directory.
func Upgrade(ctx context.Context, cfg Config, uc UpgradeConfig, log *slog.Logger) (UpgradeResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return UpgradeResult{}, fmt.Errorf("validating local stack config: %w", err)
	}
	if uc.To <= cfg.PGVersion || !pgbin.IsSupported(uc.To) {
		return UpgradeResult{}, fmt.Errorf("upgrading postgresql %d to %d: want a newer supported version (%v)", cfg.PGVersion, uc.To, pgbin.Supported())
	}
	oldL := newLayoutFor(cfg.StateDir, cfg.PGVersion)
	newL := newLayoutFor(cfg.StateDir, uc.To)
	log = log.With("state_dir", cfg.StateDir, "from", cfg.PGVersion, "to", uc.To)
	unlock, err := filelock.Lock(ctx, oldL.lock, "state dir", log)
	if err != nil {
		return UpgradeResult{}, err
	}
	defer unlock()
	if pid := readPID(oldL.pgPIDFile); isPostmasterOf(pid, oldL) {
		return UpgradeResult{}, fmt.Errorf("upgrading postgresql %d: it still runs (pid %d); stop it cleanly first", cfg.PGVersion, pid)
	}
	if fileExists(newL.pgReady) {
		return UpgradeResult{}, fmt.Errorf("upgrading to postgresql %d: a cluster of it exists in %s; remove it to upgrade again", uc.To, newL.pgDir)
	}
	oldTools, err := pgbin.EnsureTools(ctx, cfg.PGVersion, "", log)
	if err != nil {
		return UpgradeResult{}, err
	}
	newTools, err := pgbin.EnsureTools(ctx, uc.To, "", log)
	if err != nil {
		return UpgradeResult{}, err
	}
	owner, err := currentPGOwner()
	if err != nil {
		return UpgradeResult{}, err
	}
	checksums, err := dataChecksums(ctx, oldL, owner, oldTools)
	if err != nil {
		return UpgradeResult{}, err
	}
	if err := initUpgradeTarget(ctx, cfg, uc.To, checksums, newL, owner, newTools, log); err != nil {
		return UpgradeResult{}, err
	}
	res, err := runPGUpgrade(ctx, cfg.PGPort, uc.Link, oldL, newL, owner, oldTools, newTools)
	if err != nil {
		return res, err
	}
	if err := os.WriteFile(newL.pgReady, nil, 0o644); err != nil {
		return res, fmt.Errorf("writing %s: %w", newL.pgReady, err)
	}
	log.Info("postgres upgraded", "link", uc.Link, "data_dir", newL.pgData, "elapsed_ms", res.Elapsed.Milliseconds())
	return res, nil
}

// initUpgradeTarget creates the empty new cluster of version to in newL,
// with data checksums as the old cluster has them (pg_upgrade wants both
// alike; initdb turns them on by default from 18 on), the stack's
// pg_hba.conf and settings, not marked ready.
func initUpgradeTarget(ctx context.Context, cfg Config, to int, checksums bool, newL layout, owner pgOwner, tools pgbin.Dist, log *slog.Logger) error {
	for _, d := range []string{newL.pgDir, newL.pgRun, newL.pgLog} {
		if err := owner.mkdir(d, 0o700); err != nil {
			return err
		}
	}
	password, err := adminPassword(newL)
	if err != nil {
		return err
	}
	var sums []string
	switch {
	case checksums:
		sums = []string{"--data-checksums"}
	case to >= 18:
		sums = []string{"--no-data-checksums"}
	}
	if err := initCluster(ctx, newL, owner, tools, password, cfg.PGClientNetworks, log, sums...); err != nil {
		return fmt.Errorf("creating the postgresql %d cluster in %s: %w", to, newL.pgData, err)
	}
	// Ready only once pg_upgrade has filled it.
	if err := os.Remove(newL.pgReady); err != nil {
		return fmt.Errorf("unmarking the new cluster: %w", err)
	}
	newCfg := cfg
	newCfg.PGVersion = to
	conf, err := renderPGConf(newCfg, newL)
	if err != nil {
		return err
	}
	return owner.writeFile(filepath.Join(newL.pgData, newL.pgConfName), conf, 0o600)
}

// runPGUpgrade runs pg_upgrade from oldL's cluster to newL's as the owner,
// in the new cluster's directory (where it writes its logs), both servers
// on port and newL's socket directory in turn.
func runPGUpgrade(ctx context.Context, port int, link bool, oldL, newL layout, owner pgOwner, oldTools, newTools pgbin.Dist) (UpgradeResult, error) {
	mode := "--copy"
	if link {
		mode = "--link"
	}
	p := strconv.Itoa(port)
	cmd := owner.pgCommand(ctx, newTools, newL.pgDir, "pg_upgrade",
		"--old-bindir", oldTools.BinDir, "--new-bindir", newTools.BinDir,
		"--old-datadir", oldL.pgData, "--new-datadir", newL.pgData,
		"--old-port", p, "--new-port", p, "--socketdir", newL.pgRun,
		"--username", adminUser, mode)
	begin := time.Now()
	out, err := cmd.CombinedOutput()
	res := UpgradeResult{Output: lastLines(string(out), 30), NewDataDir: newL.pgData, Elapsed: time.Since(begin)}
	if err != nil {
		// What a failed check found (e.g. invalid_logical_slots.txt), then
		// its logs.
		logs, _ := filepath.Glob(filepath.Join(newL.pgData, "pg_upgrade_output.d", "*", "*.txt"))
		more, _ := filepath.Glob(filepath.Join(newL.pgData, "pg_upgrade_output.d", "*", "log", "*.log"))
		logs = append(logs, more...)
		return res, withLogs(fmt.Errorf("running pg_upgrade %s: %w\n%s", mode, err, lastLines(string(out), 40)), logs...)
	}
	return res, nil
}

// dataChecksums reports whether the stopped cluster of l has data checksums
// (pg_controldata's "Data page checksum version" is not 0).
func dataChecksums(ctx context.Context, l layout, owner pgOwner, tools pgbin.Dist) (bool, error) {
	cmd := owner.pgCommand(ctx, tools, l.pgDir, "pg_controldata", "-D", l.pgData)
	cmd.Env = append(cmd.Env, "LC_ALL=C") // the field names untranslated
	out, err := cmd.CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("running pg_controldata on %s: %w\n%s", l.pgData, err, lastLines(string(out), 10))
	}
	v, ok := controlDataField(string(out), "Data page checksum version")
	if !ok {
		return false, fmt.Errorf("pg_controldata on %s printed no data page checksum version", l.pgData)
	}
	return v != "0", nil
}

// controlDataField returns the value of the pg_controldata line "name: value".
func controlDataField(out, name string) (string, bool) {
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}
