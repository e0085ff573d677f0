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

	if err := Arm("p.err=2*error;p.crash=crash;p.delay=delay(1ms);p.hold=delay(1h)"); err != nil {
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
	if IsArmed("p.err") || !IsArmed("p.crash") || IsArmed("unarmed") {
		t.Fatalf("IsArmed: p.err (exhausted) %v, p.crash %v, unarmed %v; want false, true, false",
			IsArmed("p.err"), IsArmed("p.crash"), IsArmed("unarmed"))
	}

	_ = Eval(ctx, "p.crash")
	_ = Eval(ctx, "p.crash")
	if crashed != 2 {
		t.Fatalf("crash fired %d times, want 2 (unlimited)", crashed)
	}

	if err := Eval(ctx, "p.delay"); err != nil {
		t.Fatalf("elapsed delay: got %v", err)
	}
	// A delay holds the caller until it elapses or ctx ends: an hour's
	// delay, reached and then cancelled, ends with the cancellation.
	reached := make(chan struct{})
	OnFire = func(name string, _ Action) {
		if name == "p.hold" {
			close(reached)
		}
	}
	t.Cleanup(func() { OnFire = nil })
	cctx, cancel := context.WithCancel(ctx)
	held := make(chan error, 1)
	go func() { held <- Eval(cctx, "p.hold") }()
	<-reached
	select {
	case err := <-held:
		t.Fatalf("an hour's delay returned %v before it was cancelled", err)
	default:
	}
	cancel()
	if err := <-held; !errors.Is(err, context.Canceled) {
		t.Fatalf("delay cancelled while held: got %v", err)
	}

	if err := Arm(""); err != nil {
		t.Fatal(err)
	}
	if err := Eval(ctx, "p.err"); err != nil {
		t.Fatalf("disarmed point returned %v", err)
	}
}
