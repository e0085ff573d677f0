package verify

import (
	"reflect"
	"strings"

	"github.com/eventforge/eventforge/consumer"
)

// DefaultConsumers returns every consumer `eventforge consumer` can run,
// name → group, as it names them: the names are the choices of its --name
// flag (consumer.Config.Name), the groups what consumer.Config.GroupID
// derives when --group is not given. Each needs an effect check here;
// Validate refuses one without.
func DefaultConsumers() map[string]string {
	out := map[string]string{}
	for _, name := range consumerNames() {
		out[name] = consumer.Config{Name: name}.GroupID()
	}
	return out
}

// consumerNames reads the consumer names from the one place that lists
// them: the enum of consumer.Config.Name.
func consumerNames() []string {
	f, ok := reflect.TypeOf(consumer.Config{}).FieldByName("Name")
	if !ok {
		panic("consumer.Config has no Name field") // a compile-time fact
	}
	return strings.Split(f.Tag.Get("enum"), ",")
}
