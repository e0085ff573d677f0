package deadletter

import "testing"

func TestSuspects(t *testing.T) {
	var s Suspects
	if s.Has("a") {
		t.Fatal("a zero Suspects has a suspect")
	}
	s.Add("a")
	if !s.Has("a") || s.Has("b") {
		t.Fatal("Add did not make exactly a a suspect")
	}
	s.Remove("a")
	if s.Has("a") {
		t.Fatal("Remove kept a")
	}
	for i := range maxSuspects + 10 {
		s.Add(string(rune(i)))
	}
	if len(s.ids) != maxSuspects {
		t.Fatalf("%d suspects kept, want the bound %d", len(s.ids), maxSuspects)
	}
}
