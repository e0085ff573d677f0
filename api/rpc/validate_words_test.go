package rpc

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestEveryPatternHasWords: every string pattern declared on a request field
// is described in words in patternWords, so no violation quotes a regular
// expression at a client.
func TestEveryPatternHasWords(t *testing.T) {
	seen := 0
	for _, m := range requests {
		eachRule(m.ProtoReflect().Descriptor(), nil, func(path []protoreflect.FieldDescriptor, rule string, v protoreflect.Value) {
			if rule != "string.pattern" {
				return
			}
			seen++
			if _, ok := patternWords[v.String()]; !ok {
				t.Errorf("%s: pattern %q has no words in patternWords", path[len(path)-1].FullName(), v.String())
			}
		})
	}
	if seen == 0 {
		t.Fatal("no pattern found on the request fields")
	}
}
