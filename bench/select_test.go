package bench

import (
	"slices"
	"testing"
)

func TestSelectPhases(t *testing.T) {
	all := []string{"postgres", "api", "drain", "apply", "e2e"}
	for _, tt := range []struct {
		name      string
		requested []string
		want      []string
		refused   bool
	}{
		{"none means all", nil, all, false},
		{"in the order of the phases", []string{"drain", "postgres"}, []string{"postgres", "drain"}, false},
		{"apply with drain", []string{"apply", "drain"}, []string{"drain", "apply"}, false},
		{"apply needs drain", []string{"apply"}, nil, true},
		{"e2e needs api, drain and apply", []string{"e2e", "drain", "apply"}, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			selected, order, err := selectPhases(tt.requested, all)
			if (err != nil) != tt.refused {
				t.Fatalf("err = %v, refused %v", err, tt.refused)
			}
			if tt.refused {
				return
			}
			if !slices.Equal(order, tt.want) || len(selected) != len(tt.want) {
				t.Fatalf("order %v (set %v), want %v", order, selected, tt.want)
			}
		})
	}
}
