package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/localstack"
)

// Node is a server of a private stack's replication pair, whichever role it
// has now (localstack.Node): a switchover swaps the roles.
type Node struct {
	*localstack.Node
	p *Private
}

// PrimaryNode returns the private stack's own cluster as a Node named name
// (its physical slot on the other server once it follows it).
func (p *Private) PrimaryNode(t testing.TB, name string) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := localstack.PrimaryNode(ctx, p.Config, name, p.logger)
	if err != nil {
		t.Fatalf("the private stack's primary as node %s: %v", name, err)
	}
	return &Node{Node: n, p: p}
}

// Node returns the standby as a Node.
func (s *Standby) Node() *Node { return &Node{Node: s.s.Node(), p: s.p} }

// Switchover is a planned switchover from primary to standby: primary stops
// cleanly (its standby then has every commit), standby is promoted, and
// primary follows it, with failover slots synchronised when syncSlots
// (17+). It returns how long no server accepted writes: from the stop to
// the promotion.
func Switchover(t testing.TB, primary, standby *Node, syncSlots bool) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	begin := time.Now()
	if err := primary.Stop(ctx, primary.p.logger); err != nil {
		t.Fatalf("stopping %s cleanly: %v", primary.Name, err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatalf("promoting %s: %v", standby.Name, err)
	}
	down := time.Since(begin)
	if err := primary.Follow(ctx, standby.Node, syncSlots, primary.p.logger); err != nil {
		t.Fatalf("making %s follow %s: %v", primary.Name, standby.Name, err)
	}
	return down
}

// WaitSlotSynced waits (PostgreSQL 17+) until the failover slot named slot
// is synced and not temporary on n, a standby of primary: see
// Standby.WaitSlotSynced.
func (n *Node) WaitSlotSynced(t testing.TB, primary *Node, slot string, timeout time.Duration) {
	t.Helper()
	waitSlotSynced(t, n.p.Config.PGVersion, primary.Endpoints.AdminDSN, n.Endpoints.AdminDSN, slot, timeout)
}
