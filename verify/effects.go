package verify

import (
	"sort"

	"github.com/eventforge/eventforge/consumer/audit"
	"github.com/eventforge/eventforge/consumer/registry"
)

// effectChecks knows, per consumer name, how its effects are stored: each
// registered consumer names its check (consumer/audit).
var effectChecks = func() map[string]audit.Check {
	checks := map[string]audit.Check{}
	for _, c := range registry.All() {
		checks[c.Name] = c.Audit
	}
	return checks
}()

func knownConsumers() []string {
	names := make([]string, 0, len(effectChecks))
	for n := range effectChecks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// scope is the attribution as an audit.Scope.
func (a attribution) scope() audit.Scope {
	return audit.Scope{CTE: eventsCTE, Args: a.args()}
}
