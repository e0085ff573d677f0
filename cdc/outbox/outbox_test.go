package outbox

import "testing"

func TestTable(t *testing.T) {
	tb, err := ParseTable("public.outbox")
	if err != nil {
		t.Fatal(err)
	}
	if got := tb.Sanitize(); got != `"public"."outbox"` {
		t.Errorf("Sanitize = %s", got)
	}
	if got := tb.Deleted().Sanitize(); got != `"public"."outbox_deleted"` {
		t.Errorf("Deleted = %s", got)
	}
	if tb.Sanitize() != `"public"."outbox"` {
		t.Error("Deleted changed the outbox table")
	}
	if tb.Schema() != "public" || tb.Name() != "outbox" {
		t.Errorf("Schema, Name = %s, %s", tb.Schema(), tb.Name())
	}
	if _, err := ParseTable("outbox"); err == nil {
		t.Error("ParseTable without a schema: no error")
	}
}
