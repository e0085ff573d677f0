package failpoint

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		spec    string
		want    []Term
		wantErr bool
	}{
		{spec: "", want: nil},
		{spec: "cdc.after_ack_before_confirm=crash", want: []Term{{Name: "cdc.after_ack_before_confirm", Action: Crash}}},
		{spec: " a=2*error ; b=delay(150ms) ", want: []Term{{Name: "a", Action: Error, Count: 2}, {Name: "b", Action: Delay, Delay: 150 * time.Millisecond}}},
		{spec: "a", wantErr: true},
		{spec: "a=", wantErr: true},
		{spec: "a=explode", wantErr: true},
		{spec: "a=0*crash", wantErr: true},
		{spec: "a=x*crash", wantErr: true},
		{spec: "a=delay(soon)", wantErr: true},
		{spec: "a=delay(-1s)", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			got, err := Parse(tt.spec)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse(%q) error = %v, wantErr %v", tt.spec, err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Parse(%q) = %+v, want %+v", tt.spec, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("term %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestEval(t *testing.T) {
	ctx := context.Background()
	crashed := 0
	exit = func() { crashed++ }
	t.Cleanup(func() { _ = Arm("") })

	if err := Eval(ctx, "unarmed"); err != nil {
		t.Fatalf("unarmed point returned %v", err)
	}

	if err := Arm("p.err=2*error;p.crash=crash;p.delay=delay(20ms)"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := Eval(ctx, "p.err"); !errors.Is(err, ErrInjected) {
			t.Fatalf("firing %d: got %v, want ErrInjected", i, err)
		}
	}
	if err := Eval(ctx, "p.err"); err != nil {
		t.Fatalf("count exhausted, got %v", err)
	}

	_ = Eval(ctx, "p.crash")
	_ = Eval(ctx, "p.crash")
	if crashed != 2 {
		t.Fatalf("crash fired %d times, want 2 (unlimited)", crashed)
	}

	start := time.Now()
	if err := Eval(ctx, "p.delay"); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 20*time.Millisecond {
		t.Fatal("delay returned before its duration")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := Eval(cctx, "p.delay"); !errors.Is(err, context.Canceled) {
		t.Fatalf("delay with cancelled ctx: got %v", err)
	}

	if err := Arm(""); err != nil {
		t.Fatal(err)
	}
	if err := Eval(ctx, "p.err"); err != nil {
		t.Fatalf("disarmed point returned %v", err)
	}
}
