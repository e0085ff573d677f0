package sink

import "strings"

// Router chooses the destination (topic) of an event from its aggregate
// type.
type Router struct {
	// Topics maps aggregatetype to a topic, e.g. "order" → "eventforge.orders".
	Topics map[string]string
	// Fallback is used for aggregate types not in Topics; "{aggregatetype}"
	// in it is replaced by the aggregate type.
	Fallback string
}

// Topic returns the topic for aggregate type agg.
func (r Router) Topic(agg string) string {
	if t, ok := r.Topics[agg]; ok {
		return t
	}
	return strings.ReplaceAll(r.Fallback, "{aggregatetype}", agg)
}
