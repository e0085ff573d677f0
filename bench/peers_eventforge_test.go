package bench

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/eventforge/eventforge/internal/testenv"
)

// eventforgeEventsEnv sets the backlog of TestEventForgePeerInBothModes
// (default 500), to measure a larger drain by hand.
const eventforgeEventsEnv = "EVENTFORGE_BENCH_EVENTFORGE_EVENTS"

// TestEventForgePeerInBothModes runs EventForge's reader as the peers phase
// does, at least once and with --exactly-once: a drain of a backlog
// committed behind its slot (exactly once: until a read_committed reader
// read every event), then a latency window of its own at 100 orders/s, and
// checks that the figures are whole: every order of the window measured
// from commit to the walsender's send, to its append and to its read, in
// that order, and a transactional relay's records read only after their
// transaction commits.
func TestEventForgePeerInBothModes(t *testing.T) {
	events := peerTestEvents(t, eventforgeEventsEnv)
	te := testenv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "eventforge")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/eventforge").CombinedOutput(); err != nil {
		t.Fatalf("building eventforge: %v\n%s", err, out)
	}
	r := peerTestRunner(te, dir)
	r.sz = sizes{peerWarmupOrders: 100, peerWarmup: time.Second, peerDuration: 2 * time.Second}
	positions := te.Database + ".positions"
	t.Cleanup(func() { r.env.deleteTopics(positions) })
	for _, relay := range []peerRelay{eventforgePeer{binary: bin}, eventforgePeer{binary: bin, positionTopic: positions}} {
		name := relay.Traits().Name
		t.Run(name, func(t *testing.T) {
			db, run := preparePeerTest(ctx, t, r, relay, relay.Traits().Key, events)
			want := len(outboxEvents(t, db))
			d := relayDrain{Round: 1}
			c, err := r.drainPeer(ctx, relay, db, run, want, &d)
			if c != nil {
				c.stop()
			}
			if err != nil {
				logTail(t, filepath.Join(dir, "peer-"+run.name+".log"))
				t.Fatalf("draining: %v", err)
			}
			if d.Events != want || d.EventsPerSec <= 0 || d.PeakRSSBytes <= 0 || d.RelayCPUPer1000 <= 0 || d.FirstRecordSecs > d.Seconds {
				t.Errorf("implausible drain figures: %+v", d)
			}
			lat, err := r.peerWindow(ctx, relay, db, 100, 1)
			if err != nil {
				t.Fatalf("latency window: %v", err)
			}
			t.Logf("%s: drain %.0f events/s; at 100/s, %d orders: commit → sent %s / %s, → append %s / %s, → read %s / %s (p50 / p99); "+
				"tail before the send %.0f%% (append), %.0f%% (read); relay CPU %.3f s per 1,000 events",
				name, d.EventsPerSec, lat.Orders, ms(lat.CommitToSent.P50), ms(lat.CommitToSent.P99), ms(lat.CommitToAppend.P50), ms(lat.CommitToAppend.P99),
				ms(lat.CommitToRead.P50), ms(lat.CommitToRead.P99), 100*lat.AppendTailBeforeSent, 100*lat.ReadTailBeforeSent, lat.RelayCPUPer1000)
			if lat.Orders < 50 || lat.AchievedPerSec <= 0 || lat.RelayCPUPer1000 <= 0 {
				t.Errorf("implausible window: %+v", lat)
			}
			// Each order is sent by the walsender before its record is
			// appended, and appended before it is read.
			if lat.CommitToSent.P50 <= 0 || lat.CommitToSent.P50 > lat.CommitToAppend.P50 || lat.CommitToAppend.P50 > lat.CommitToRead.P50 {
				t.Errorf("stages out of order: sent %s, append %s, read %s (p50)", lat.CommitToSent.P50, lat.CommitToAppend.P50, lat.CommitToRead.P50)
			}
			for _, share := range []float64{lat.AppendTailBeforeSent, lat.ReadTailBeforeSent} {
				if share <= 0 || share > 1 {
					t.Errorf("share of the tail before the send %v, want in (0, 1]", share)
				}
			}
			// A transaction commits once it is --transaction-interval
			// (100 ms) old or full: a read_committed reader waits for it.
			if relay.Traits().Transactional && lat.CommitToRead.P50-lat.CommitToAppend.P50 < 10*time.Millisecond {
				t.Errorf("exactly once: read p50 %s only %s after the append p50 %s", lat.CommitToRead.P50,
					lat.CommitToRead.P50-lat.CommitToAppend.P50, lat.CommitToAppend.P50)
			}
		})
	}
}
