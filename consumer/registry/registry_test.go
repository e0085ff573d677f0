package registry

import (
	"regexp"
	"testing"
)

func TestRegistry(t *testing.T) {
	seen, owner := map[string]bool{}, map[string]string{}
	drilled := 0
	for _, c := range All() {
		if c.Name == "" || c.Handler == nil || c.Audit == nil {
			t.Errorf("consumer %+v: a name, a handler and an audit are required", c)
		}
		if !nameRE.MatchString(c.Name) {
			t.Errorf("consumer %q: the name must be lowercase letters and digits, words joined by - (it names marks, groups, and Kubernetes objects)", c.Name)
		}
		if seen[c.Name] {
			t.Errorf("consumer %s is registered twice", c.Name)
		}
		seen[c.Name] = true
		h, err := Handler(c.Name)
		if err != nil || h != c.Handler {
			t.Errorf("Handler(%q) = %v, %v", c.Name, h, err)
		}
		for _, table := range c.Tables {
			if !tableRE.MatchString(table) {
				t.Errorf("consumer %s: table %q is not a plain lowercase name", c.Name, table)
			}
			if o, ok := owner[table]; ok {
				t.Errorf("table %s is listed by consumers %s and %s; each table has one owner", table, o, c.Name)
			}
			owner[table] = c.Name
		}
		if c.Drilled {
			drilled++
			if c.OrderEffects == nil {
				t.Errorf("consumer %s is drilled but has no OrderEffects: the drills count its effects on their order", c.Name)
			}
			if Drilled() != c.Name {
				t.Errorf("Drilled() = %q, want %q", Drilled(), c.Name)
			}
		}
	}
	if drilled != 1 {
		t.Errorf("%d consumers are marked Drilled, want exactly 1: the console's drills run on it", drilled)
	}
	if _, err := Handler("nope"); err == nil {
		t.Error("Handler of an unknown name: no error")
	}
	if _, err := Lookup(DefaultName); err != nil {
		t.Errorf("the default consumer %q is not registered: %v", DefaultName, err)
	}
	if got := DefaultGroups()["ledger"]; got != "eventforge-ledger" {
		t.Errorf("default group of ledger %q", got)
	}
	if got := Tables(); len(got) != len(owner) {
		t.Errorf("Tables() = %v, want the %d tables of the consumers", got, len(owner))
	}
}

// nameRE is what a consumer name may be (a DNS label, as Kubernetes object
// names need); tableRE what a table name may be.
var (
	nameRE  = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
	tableRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

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
