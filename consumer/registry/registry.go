// Package registry lists every EventForge consumer, each with everything
// the rest of EventForge needs to know about it. It is the one place that
// does: `eventforge consumer --name` and the help of `eventforge dlq
// --consumer` take their choices from it, `eventforge dev` starts each,
// verify audits each by default and counts its effects on one order, the
// console shows each and runs its drills on the one marked Drilled. What
// cannot be derived from it — the deployment manifests under deploy/ and
// the grants of the consumers' tables in schema/migrations — is checked
// against it by the deploy tests, which name the file that lacks a
// registered consumer.
//
// A new consumer is a handler package (see package engine for the Handler
// contract, consumertest for the suite it must pass, and package audit for
// the checks verify runs on its business tables), its migration if it has
// tables, one entry in consumers below, and its entries in the manifests
// that docs/architecture.md ("Where to add") lists.
package registry

import (
	"fmt"
	"strings"

	"github.com/eventforge/eventforge/consumer/audit"
	"github.com/eventforge/eventforge/consumer/engine"
	"github.com/eventforge/eventforge/consumer/fulfillment"
	"github.com/eventforge/eventforge/consumer/ledger"
)

// Consumer is one registered consumer.
type Consumer struct {
	// Name names the consumer's marks (consumer, event_id), its default
	// group DefaultGroup(Name), its --name and its deployments
	// (consumer-<name>).
	Name string
	// Handler applies its events.
	Handler engine.Handler
	// Audit compares its business tables with its marks (`eventforge
	// verify`).
	Audit audit.Check
	// OrderEffects counts its business effects on one order, for verify's
	// per-order audit, the console's order trace and its drills; nil when
	// its effects are not per order (the ledger keeps per-customer
	// counters).
	OrderEffects audit.OrderCount
	// Tables are the business tables it writes. Its migration creates them
	// and, when the roles of docs/operations.md exist, grants SELECT,
	// INSERT and UPDATE on each to eventforge_consumer and SELECT to
	// eventforge_api (the console reads them), as
	// schema/migrations/00005_component_grants.sql does for the first
	// consumers; the deploy tests check the grants.
	Tables []string
	// Drilled marks the consumer the console's failure drills restart and
	// count the effects of: exactly one consumer, one with OrderEffects.
	Drilled bool
}

// consumers is every consumer, in the order `eventforge dev` starts them.
var consumers = []Consumer{
	{
		Name:         fulfillment.Name,
		Handler:      fulfillment.Handler{},
		Audit:        fulfillment.Audit,
		OrderEffects: fulfillment.OrderEffects,
		Tables:       []string{"shipments"},
		Drilled:      true,
	},
	{
		Name:    ledger.Name,
		Handler: ledger.Handler{},
		Audit:   ledger.Audit,
		Tables:  []string{"ledger"},
	},
}

// DefaultName is the consumer `eventforge consumer` runs without --name.
const DefaultName = fulfillment.Name

// GroupPrefix prefixes a consumer's name to make its default Kafka group.
const GroupPrefix = "eventforge-"

// All returns every registered consumer.
func All() []Consumer {
	return append([]Consumer(nil), consumers...)
}

// Names returns the name of every registered consumer, in registry order.
func Names() []string {
	names := make([]string, len(consumers))
	for i, c := range consumers {
		names[i] = c.Name
	}
	return names
}

// Lookup returns the consumer called name.
func Lookup(name string) (Consumer, error) {
	for _, c := range consumers {
		if c.Name == name {
			return c, nil
		}
	}
	return Consumer{}, fmt.Errorf("unknown consumer %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Handler returns the handler of the consumer called name.
func Handler(name string) (engine.Handler, error) {
	c, err := Lookup(name)
	return c.Handler, err
}

// Drilled returns the name of the consumer the console's drills act on
// (the one marked Drilled), or "" when none is.
func Drilled() string {
	for _, c := range consumers {
		if c.Drilled {
			return c.Name
		}
	}
	return ""
}

// Tables returns the business tables of every registered consumer, in
// registry order.
func Tables() []string {
	var tables []string
	for _, c := range consumers {
		tables = append(tables, c.Tables...)
	}
	return tables
}

// DefaultGroup returns the Kafka group of the consumer called name when none
// is configured: eventforge-<name>.
func DefaultGroup(name string) string {
	return GroupPrefix + name
}

// DefaultGroups maps every registered consumer to its default group.
func DefaultGroups() map[string]string {
	out := make(map[string]string, len(consumers))
	for _, c := range consumers {
		out[c.Name] = DefaultGroup(c.Name)
	}
	return out
}

// NamesInWords lists the names for a sentence: "a", "a or b", "a, b or c".
func NamesInWords() string {
	names := Names()
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// FlagVars are the ${variables} flag tags use to name the registered
// consumers, for internal/config's Vars and Defaults: consumer_names (the choices of --name, comma-separated),
// consumer_names_in_words (the same for a help text), consumer_default
// (DefaultName) and consumer_groups (every consumer with its default group,
// as name=group pairs separated by ";").
func FlagVars() map[string]string {
	groups := make([]string, len(consumers))
	for i, c := range consumers {
		groups[i] = c.Name + "=" + DefaultGroup(c.Name)
	}
	return map[string]string{
		"consumer_names":          strings.Join(Names(), ","),
		"consumer_names_in_words": NamesInWords(),
		"consumer_default":        DefaultName,
		"consumer_groups":         strings.Join(groups, ";"),
	}
}
