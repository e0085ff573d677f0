package registry

import "testing"

func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range All() {
		if c.Name == "" || c.Handler == nil || c.Audit == nil {
			t.Errorf("consumer %+v: a name, a handler and an audit are required", c)
		}
		if seen[c.Name] {
			t.Errorf("consumer %s is registered twice", c.Name)
		}
		seen[c.Name] = true
		h, err := Handler(c.Name)
		if err != nil || h != c.Handler {
			t.Errorf("Handler(%q) = %v, %v", c.Name, h, err)
		}
	}
	if _, err := Handler("nope"); err == nil {
		t.Error("Handler of an unknown name: no error")
	}
	if got := DefaultGroups()["ledger"]; got != "eventforge-ledger" {
		t.Errorf("default group of ledger %q", got)
	}
}

func TestNamesInWords(t *testing.T) {
	saved := consumers
	t.Cleanup(func() { consumers = saved })
	tests := []struct {
		names []string
		want  string
	}{
		{[]string{"a"}, "a"},
		{[]string{"a", "b"}, "a or b"},
		{[]string{"a", "b", "c"}, "a, b or c"},
	}
	for _, tt := range tests {
		consumers = nil
		for _, n := range tt.names {
			consumers = append(consumers, Consumer{Name: n})
		}
		if got := NamesInWords(); got != tt.want {
			t.Errorf("NamesInWords() with %v = %q, want %q", tt.names, got, tt.want)
		}
	}
}
