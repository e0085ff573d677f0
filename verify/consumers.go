package verify

import "github.com/eventforge/eventforge/consumer/registry"

// DefaultConsumers returns every registered consumer (package
// consumer/registry), name → the group `eventforge consumer` uses when
// --group is not given. Each needs an effect check here; Validate refuses
// one without.
func DefaultConsumers() map[string]string {
	return registry.DefaultGroups()
}
