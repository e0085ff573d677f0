package audit

import (
	"fmt"
	"reflect"
	"testing"
)

func TestScopeWithPutsTheConsumerFirst(t *testing.T) {
	s := Scope{CTE: "ev AS (SELECT 1)", Args: []any{[]string{"a"}, []string{"b"}}}
	got := s.With("ledger")
	want := []any{"ledger", []string{"a"}, []string{"b"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("With = %v, want %v", got, want)
	}
	if len(s.Args) != 2 {
		t.Fatalf("With changed the scope's arguments: %v", s.Args)
	}
}

func TestDetailKeepsAtMostMaxDetails(t *testing.T) {
	var e Effects
	for i := range MaxDetails + 5 {
		e.Detail("detail %d", i)
	}
	if len(e.Details) != MaxDetails || e.Details[0] != "detail 0" || e.Details[MaxDetails-1] != fmt.Sprintf("detail %d", MaxDetails-1) {
		t.Fatalf("details %q, want the first %d", e.Details, MaxDetails)
	}
}
