package verify

import (
	"github.com/eventforge/eventforge/consumer/dlq"
	"github.com/eventforge/eventforge/contract"
	"github.com/eventforge/eventforge/internal/kafkaread"
)

// pos is a record's place in the topic.
type pos struct {
	partition int32
	offset    int64
}

// checkDeliveries counts deliveries and duplicates, finds outbox events
// missing from Kafka (lost once the slot confirmed past them, unpublished
// before, and past the grace when committed longer ago than it; neither when
// the relay dead-lettered them and nobody replayed them yet), and checks
// per-order partitioning and order. An event in the relay's dead-letter
// table takes no part in the ordering checks: its first delivery is its
// replay, after later events of its order (docs/cdc.md, "Records Kafka
// refuses").
func (a *auditor) checkDeliveries(rep *Report, events []outboxEvent, records []kafkaread.Record, slotPassed bool, relay relayDeadLetters) {
	rep.Deliveries = len(records)
	seen := map[string]int{}
	// first occurrence of each event in Kafka
	first := map[string]pos{}
	partitionsOfKey := map[string]map[int32]bool{}
	for _, r := range records {
		id := r.Headers[contract.HeaderID]
		seen[id]++
		if p, ok := first[id]; !ok || (p.partition == r.Partition && r.Offset < p.offset) {
			first[id] = pos{r.Partition, r.Offset}
		}
		if partitionsOfKey[r.Key] == nil {
			partitionsOfKey[r.Key] = map[int32]bool{}
		}
		partitionsOfKey[r.Key][r.Partition] = true
	}
	rep.DuplicateDeliveries = len(records) - len(seen)
	rep.RelayDuplicates, rep.DLQReplays = relayDuplicates(records)
	a.checkRelayDeadLetters(rep, relay, first)

	inOutbox := make(map[string]bool, len(events))
	lastOfKey := map[string]pos{}
	lastIDOfKey := map[string]string{}
	for _, e := range events {
		inOutbox[e.id] = true
		p, published := first[e.id]
		if !published {
			switch {
			case relay.pending(e.id):
				// counted by checkRelayDeadLetters
			case slotPassed:
				rep.Lost++
				rep.violate("lost: outbox event %s (%s of order %s) is not in %s although the slot confirmed past it", e.id, e.typ, e.key, a.cfg.Topic)
			case e.age > a.cfg.Grace:
				rep.Unpublished++
				rep.UnpublishedPastGrace++
				rep.violate("unpublished: outbox event %s (%s of order %s) committed %s ago is not in %s (grace %s)", e.id, e.typ, e.key, e.age.Round(1e9), a.cfg.Topic, a.cfg.Grace)
			default:
				rep.Unpublished++
			}
			continue
		}
		if _, dead := relay[e.id]; dead {
			continue
		}
		if prev, ok := lastOfKey[e.key]; ok && prev.partition == p.partition && p.offset < prev.offset {
			rep.OrderingViolations++
			rep.violate("ordering: event %s of order %s is at offset %d, before the earlier-committed event %s at offset %d", e.id, e.key, p.offset, lastIDOfKey[e.key], prev.offset)
		}
		lastOfKey[e.key], lastIDOfKey[e.key] = p, e.id
	}
	checkCreatedFirst(rep, records, first, inOutbox, relay)
	for key, parts := range partitionsOfKey {
		if len(parts) > 1 {
			rep.OrderingViolations++
			rep.violate("ordering: events of order %s are spread over %d partitions", key, len(parts))
		}
	}
}

// checkCreatedFirst checks what the outbox can no longer tell once its rows
// are pruned: an order's OrderCreated is its first event, so no other event
// of the order may come before it in its partition (first deliveries). Pairs
// whose events are both in the outbox snapshot are left to the commit-order
// check; events the relay dead-lettered are left out.
func checkCreatedFirst(rep *Report, records []kafkaread.Record, first map[string]pos, inOutbox map[string]bool, relay relayDeadLetters) {
	type event struct {
		id, typ string
		at      pos
	}
	created := map[string]event{}
	others := map[string][]event{}
	done := map[string]bool{}
	for _, r := range records {
		id := r.Headers[contract.HeaderID]
		if _, dead := relay[id]; done[id] || dead {
			continue
		}
		done[id] = true
		e := event{id: id, typ: r.Headers[contract.HeaderType], at: first[id]}
		if e.typ == contract.TypeOrderCreated {
			if c, ok := created[r.Key]; !ok || e.at.offset < c.at.offset {
				created[r.Key] = e
			}
			continue
		}
		others[r.Key] = append(others[r.Key], e)
	}
	for key, c := range created {
		for _, o := range others[key] {
			if o.at.partition != c.at.partition || o.at.offset > c.at.offset || (inOutbox[o.id] && inOutbox[c.id]) {
				continue
			}
			rep.OrderingViolations++
			rep.violate("ordering: %s %s of order %s is at offset %d of partition %d, before its OrderCreated %s at offset %d",
				o.typ, o.id, key, o.at.offset, o.at.partition, c.id, c.at.offset)
		}
	}
}

// checkConsumer finds records the consumer's committed offset passed without
// a mark (lost) and counts those it has not reached yet (pending). A record
// dead-lettered by the consumer, or whose dead letter was purged, is
// neither.
func checkConsumer(rep *Report, name string, records []kafkaread.Record, committed map[int32]int64, marks, dead, purged map[string]bool) {
	rep.DeadLettered[name] = len(dead)
	rep.Purged[name] = len(purged)
	pending := map[string]bool{}
	for _, r := range records {
		id := r.Headers[contract.HeaderID]
		if marks[id] || dead[id] || purged[id] {
			continue
		}
		if r.Offset < committed[r.Partition] {
			rep.Lost++
			rep.violate("lost: consumer %s committed offset %d of partition %d past event %s (offset %d) without applying it", name, committed[r.Partition], r.Partition, id, r.Offset)
			continue
		}
		pending[id] = true
	}
	rep.Pending[name] = len(pending)
}

// relayDuplicates splits the duplicate records: those the relay published
// again, and the DLQ replays (which carry dlq.HeaderReplaySource).
func relayDuplicates(records []kafkaread.Record) (relay, replays int) {
	seen := map[string]bool{}
	for _, r := range records {
		if r.Headers[dlq.HeaderReplaySource] != "" {
			replays++
			continue
		}
		id := r.Headers[contract.HeaderID]
		if seen[id] {
			relay++
		}
		seen[id] = true
	}
	return relay, replays
}
