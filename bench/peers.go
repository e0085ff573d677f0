package bench

import (
	"context"
	"fmt"
	"slices"
)

// peersResult is the peers phase: the same work done by each relay, in
// rounds that alternate the relays (rounds.go).
type peersResult struct {
	// Backlog is the number of events committed for each relay's drains.
	Backlog int `json:"backlog_events"`
	// Rounds is how many times each relay drained the backlog and took
	// each offered load of Rates.
	Rounds int   `json:"rounds"`
	Rates  []int `json:"offered_per_sec"`
	// WarmupOrders, WarmupSecs and WindowSecs are each latency window's
	// warm-up (orders committed at full speed and read, then the load at
	// the rate) and measured part: only orders committed after the warm-up
	// are measured.
	WarmupOrders int     `json:"warmup_orders"`
	WarmupSecs   float64 `json:"warmup_seconds"`
	WindowSecs   float64 `json:"window_seconds"`
	// Recvlogical is PostgreSQL's own client, pg_recvlogical, streaming a
	// copy of the slot made before the backlog to /dev/null, once per
	// round: the floor every CDC drain is compared with, round by round.
	Recvlogical []recvlogicalRound `json:"pg_recvlogical"`
	Relays      []relayFigures     `json:"relays"`
	// Unavailable names each relay that could not be set up, with why.
	Unavailable map[string]string `json:"unavailable,omitempty"`
	// Skipped names each relay --peer-relays left out.
	Skipped []string `json:"skipped,omitempty"`
}

// recvlogicalRound is pg_recvlogical's drain of the backlog in one round.
type recvlogicalRound struct {
	Round        int     `json:"round"`
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
}

// relayFigures is what the peers phase measured of one relay: a drain per
// round, and a latency window per offered rate and round.
type relayFigures struct {
	Relay   string         `json:"relay"`
	Drains  []relayDrain   `json:"drains"`
	Latency []relayLatency `json:"latency"`
}

// relayDrain is one relay draining the backlog, from the start of its
// process until every event is visible to a read_committed reader.
type relayDrain struct {
	Round        int     `json:"round"`
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	// FirstRecordSecs is from the start of the process to its first record
	// visible in Kafka (sampled every 20 ms).
	FirstRecordSecs float64 `json:"first_record_seconds"`
	PeakRSSBytes    int64   `json:"relay_peak_rss_bytes"`
	// RelayCPUPer1000 is the relay process's CPU seconds, start-up included.
	RelayCPUPer1000 float64 `json:"relay_cpu_seconds_per_1000_events"`
	// PostgresCPUPer1000 is the CPU seconds of the stack's PostgreSQL
	// cluster during the drain: every process of it, autovacuum and the
	// backends it reaped included.
	PostgresCPUPer1000 float64 `json:"postgres_cpu_seconds_per_1000_events"`
	// WALBytesPer1000 is the WAL the cluster wrote during the drain.
	WALBytesPer1000 float64 `json:"wal_bytes_per_1000_events"`
}

// relayLatency is one latency window: the relay under open-loop load at one
// offered rate in one round. Every latency starts at the order's created_at
// (the order transaction's start, a moment before its commit).
type relayLatency struct {
	OfferedPerSec  int     `json:"offered_per_sec"`
	Round          int     `json:"round"`
	AchievedPerSec float64 `json:"achieved_per_sec"`
	Orders         int     `json:"orders"`
	// CommitToAppend ends at the record's broker append time: for a
	// transactional relay the record is then in the log but not yet
	// visible to read_committed readers.
	CommitToAppend latency `json:"commit_to_append"`
	// CommitToRead ends when the benchmark's read_committed reader,
	// tailing the topic, received the record.
	CommitToRead latency `json:"commit_to_read_committed"`
	// CommitToSent ends when the walsender sent the order's commit (the
	// walsender probe): PostgreSQL's part, before any CDC relay has it.
	CommitToSent latency `json:"commit_to_walsender_sent"`
	// AppendTailBeforeSent and ReadTailBeforeSent are, of the orders at or
	// above the window's p99 of CommitToAppend and of CommitToRead, the
	// share of their time spent before the walsender sent their commit
	// (tailShareBefore); the rest is the relay's (and, for the read, the
	// reader's fetch).
	AppendTailBeforeSent float64 `json:"append_p99_tail_share_before_sent"`
	ReadTailBeforeSent   float64 `json:"read_p99_tail_share_before_sent"`
	// RelayCPUPer1000 is the relay's CPU seconds per 1,000 orders, from the
	// end of the warm-up until the window's last order was read.
	RelayCPUPer1000 float64 `json:"relay_cpu_seconds_per_1000_events"`
	// OtherCores is the cores processes outside the stack, the relay and
	// the benchmark used during the load: above a tenth of a core the
	// latency measures the machine's contention as much as the relay.
	OtherCores float64 `json:"other_cores"`
}

// peersPhase sets up each relay's database with its backlog, then runs
// the relays in rounds: every round each relay drains the backlog (and
// pg_recvlogical streams it), then, at each offered rate, every round each
// relay takes the load for a window of its own.
func (r *runner) peersPhase(ctx context.Context) error {
	relays, unavailable, err := r.peerRelays(ctx)
	if err != nil {
		return err
	}
	res := &peersResult{Backlog: r.sz.peerBacklog, Rounds: r.sz.peerRounds, Rates: r.sz.peerRates, Unavailable: unavailable,
		WarmupOrders: r.sz.peerWarmupOrders, WarmupSecs: r.sz.peerWarmup.Seconds(), WindowSecs: r.sz.peerDuration.Seconds()}
	for _, name := range peerColumns {
		if len(r.cfg.PeerRelays) > 0 && !slices.Contains(r.cfg.PeerRelays, name) {
			res.Skipped = append(res.Skipped, name)
		}
	}
	r.res.Peers = res
	for _, relay := range relays {
		res.Relays = append(res.Relays, relayFigures{Relay: relay.Traits().Name})
	}
	homes, err := r.peerHomes(ctx, relays)
	defer r.dropPeerHomes(context.WithoutCancel(ctx), homes)
	if !r.cfg.Keep {
		defer r.env.deleteTopics(r.env.database + ".positions")
	}
	if err != nil {
		return err
	}
	for round := 1; round <= r.sz.peerRounds; round++ {
		if err := r.peerDrainRound(ctx, relays, homes, round); err != nil {
			return err
		}
	}
	r.dropBaseSlots(ctx, homes)
	for _, rate := range r.sz.peerRates {
		for round := 1; round <= r.sz.peerRounds; round++ {
			for i, relay := range relays {
				lat, err := r.peerWindow(ctx, relay, homes[relay.Traits().Home].live(), rate, round)
				if err != nil {
					return fmt.Errorf("relay %s at %d/s, round %d: %w", relay.Traits().Name, rate, round, err)
				}
				res.Relays[i].Latency = append(res.Relays[i].Latency, lat)
			}
		}
	}
	return nil
}

// peerDrainRound is one round of drains: pg_recvlogical on the first home
// with a slot, then each relay on a fresh copy of its backlog.
func (r *runner) peerDrainRound(ctx context.Context, relays []peerRelay, homes map[string]*peerHome, round int) error {
	if ref := referenceHome(relays, homes); ref != nil {
		rl, err := r.recvlogicalRound(ctx, ref, round)
		if err != nil {
			return fmt.Errorf("pg_recvlogical, round %d: %w", round, err)
		}
		r.res.Peers.Recvlogical = append(r.res.Peers.Recvlogical, rl)
	}
	for i, relay := range relays {
		d, err := r.peerDrain(ctx, relay, homes[relay.Traits().Home], round)
		if err != nil {
			return fmt.Errorf("relay %s, drain of round %d: %w", relay.Traits().Name, round, err)
		}
		r.res.Peers.Relays[i].Drains = append(r.res.Peers.Relays[i].Drains, d)
	}
	return nil
}

// referenceHome is the home pg_recvlogical streams a copy of: EventForge's
// when measured, else the first with a slot; nil when no relay streams from
// a slot.
func referenceHome(relays []peerRelay, homes map[string]*peerHome) *peerHome {
	if h := homes[homeEventForge]; h != nil {
		return h
	}
	for _, relay := range relays {
		if t := relay.Traits(); t.Slot {
			return homes[t.Home]
		}
	}
	return nil
}
