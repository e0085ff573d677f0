// Package registry lists every EventForge consumer. It is the one place that
// does: `eventforge consumer --name` takes its choices from it, `eventforge
// dev` starts each, and verify audits each by default. A new consumer is a
// handler package (see package engine for the Handler contract, consumertest
// for the suite it must pass, and package audit for the check verify runs on
// its business tables) plus one line in consumers below.
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
	// group DefaultGroup(Name) and its --name.
	Name string
	// Handler applies its events.
	Handler engine.Handler
	// Audit compares its business tables with its marks (`eventforge
	// verify`).
	Audit audit.Check
}

// consumers is every consumer, in the order `eventforge dev` starts them.
var consumers = []Consumer{
	{Name: fulfillment.Name, Handler: fulfillment.Handler{}, Audit: fulfillment.Audit},
	{Name: ledger.Name, Handler: ledger.Handler{}, Audit: ledger.Audit},
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

// Handler returns the handler of the consumer called name.
func Handler(name string) (engine.Handler, error) {
	for _, c := range consumers {
		if c.Name == name {
			return c.Handler, nil
		}
	}
	return nil, fmt.Errorf("unknown consumer %q (known: %s)", name, strings.Join(Names(), ", "))
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
