package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/localstack"
)

// Upgrade upgrades the private stack's stopped PostgreSQL to major version
// to with pg_upgrade (--link when link, else --copy) and starts the new
// version on the same port: the stack's Env and DSNs stay valid. It fails
// the test when pg_upgrade refuses, with its report.
func (p *Private) Upgrade(t testing.TB, to int, link bool) localstack.UpgradeResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := localstack.Upgrade(ctx, p.Config, localstack.UpgradeConfig{To: to, Link: link}, p.logger)
	if err != nil {
		t.Fatalf("upgrading the private stack's postgresql %d to %d: %v", p.Config.PGVersion, to, err)
	}
	p.Config.PGVersion = to
	if _, err := localstack.Up(ctx, p.Config, p.logger); err != nil {
		t.Fatalf("starting postgresql %d after the upgrade: %v", to, err)
	}
	return res
}
