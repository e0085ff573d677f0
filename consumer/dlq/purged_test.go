package dlq

import "testing"

func TestPlanned(t *testing.T) {
	es := []Entry{{Partition: 0, Offset: 3}, {Partition: 0, Offset: 5}, {Partition: 1, Offset: 0}, {Partition: 2, Offset: 7}}
	plans := []PurgePlan{{Partition: 0, Low: 3, To: 5}, {Partition: 1, Low: 0, To: 1}}
	got := Planned(es, plans)
	if len(got) != 2 || got[0].Offset != 3 || got[0].Partition != 0 || got[1].Partition != 1 {
		t.Fatalf("planned %+v, want 0:3 and 1:0 (To is exclusive, unplanned partitions untouched)", got)
	}
	if got := Planned(es, nil); len(got) != 0 {
		t.Fatalf("no plan selected %+v", got)
	}
}
