package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestFitCostRecoversTheLine(t *testing.T) {
	// 0.14 cores at any rate plus 50 µs per order, measured at four rates.
	x := []float64{250, 500, 1000, 1930}
	y := make([]float64, len(x))
	for i, r := range x {
		y[i] = 0.14 + 50e-6*r
	}
	f, err := fitCost(x, y)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(f.PerOrder-50e-6) > 1e-12 || math.Abs(f.BaseCores-0.14) > 1e-9 {
		t.Fatalf("fit = %+v, want 50 µs per order and 0.14 cores", f)
	}

	// Noisy points: the least-squares line of (1,1), (2,3), (3,2) is
	// y = 1 + 0.5x.
	f, err = fitCost([]float64{1, 2, 3}, []float64{1, 3, 2})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(f.PerOrder-0.5) > 1e-12 || math.Abs(f.BaseCores-1) > 1e-12 {
		t.Fatalf("fit = %+v, want slope 0.5 and intercept 1", f)
	}
}

func TestFitCostNeedsTwoRates(t *testing.T) {
	for name, x := range map[string][]float64{"one rate": {100}, "the same rate twice": {500, 500}, "none": {}} {
		if f, err := fitCost(x, make([]float64, len(x))); err == nil {
			t.Errorf("%s: fit %+v, want an error", name, f)
		}
	}
	if _, err := fitCost([]float64{1, 2}, []float64{1}); err == nil {
		t.Error("mismatched lengths: no error")
	}
}

func TestFitComponentCostsUsesEachRatesWindow(t *testing.T) {
	rates := []rateResult{
		{OfferedPerSec: 500, Load: loadResult{PerSecond: 500}},
		{OfferedPerSec: 2000, Load: loadResult{PerSecond: 1500}}, // the achieved rate counts
	}
	windows := []phaseCPU{
		{Phase: "api gRPC", Cores: map[string]float64{"api": 0.9, "cdc": 0.9}},
		{Phase: e2eWindowName(2000), Cores: map[string]float64{"api": 0.25, "cdc": 0.3}},
		{Phase: e2eWindowName(500), Cores: map[string]float64{"api": 0.15, "cdc": 0.2}},
	}
	fits, err := fitComponentCosts(rates, windows, []string{"api", "cdc", "consumer"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]costFit{
		"api":      {PerOrder: 0.1 / 1000, BaseCores: 0.1},
		"cdc":      {PerOrder: 0.1 / 1000, BaseCores: 0.15},
		"consumer": {}, // in no window: 0 cores at both rates
	} {
		got := fits[name]
		if math.Abs(got.PerOrder-want.PerOrder) > 1e-12 || math.Abs(got.BaseCores-want.BaseCores) > 1e-9 {
			t.Errorf("%s: fit %+v, want %+v", name, got, want)
		}
	}

	if _, err := fitComponentCosts(append(rates, rateResult{OfferedPerSec: 1000}), windows, []string{"api"}); err == nil ||
		!strings.Contains(err.Error(), "1000 orders/s") {
		t.Errorf("a rate without its window: err %v, want it named", err)
	}
}

func TestTableShowsTheFitOfEachComponent(t *testing.T) {
	res := Results{Phases: []string{"e2e"}, Components: map[string]componentUsage{
		"api":      {CPUSecondsPer1000: 0.22, Fit: &costFit{PerOrder: 50e-6, BaseCores: 0.14}},
		"cdc":      {CPUSecondsPer1000: 0.20, Fit: &costFit{PerOrder: 30e-6, BaseCores: 0.15}},
		"consumer": {CPUSecondsPer1000: 0.15, Fit: &costFit{PerOrder: 30e-6, BaseCores: 0.10}},
	}}
	var out bytes.Buffer
	res.printTable(&out)
	for _, want := range []string{
		"0.22 CPU s per 1,000 orders — over the rates, 0.050 s per added 1,000 orders + 0.14 cores at any rate",
		"0.20 CPU s per 1,000 orders — over the rates, 0.030 s per added 1,000 orders + 0.15 cores at any rate",
		"0.15 CPU s per 1,000 orders — over the rates, 0.030 s per added 1,000 orders + 0.10 cores at any rate",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	// The combined target is retired: no sum, no target.
	if strings.Contains(out.String(), "api + cdc + consumer") || strings.Contains(out.String(), "0.35") {
		t.Errorf("the table sums the components against a target:\n%s", out.String())
	}

	// Without fits (one rate), each figure is printed without a fit.
	for name, c := range res.Components {
		c.Fit = nil
		res.Components[name] = c
	}
	out.Reset()
	res.printTable(&out)
	if !strings.Contains(out.String(), "0.22 CPU s per 1,000 orders\n") || strings.Contains(out.String(), "over the rates") {
		t.Errorf("table without fits:\n%s", out.String())
	}
}
