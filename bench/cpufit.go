package bench

import "fmt"

// costFit splits a component's CPU over the end-to-end rates into what each
// order adds and what the component spends at any rate: the least-squares
// line through (orders/s achieved, cores used) of each rate's window. At
// open-loop rates most of a component's CPU is per wakeup (system calls,
// context switches, the Go scheduler), which a rate spreads over more or
// fewer orders; the average per order hides that split, the fit shows it.
type costFit struct {
	// PerOrder is the slope: CPU seconds each added order costs.
	PerOrder float64 `json:"cpu_seconds_per_added_order"`
	// BaseCores is the intercept: the cores the line gives at 0 orders/s.
	BaseCores float64 `json:"base_cores"`
}

// fitCost fits the line through the points (orders/s, cores). It needs two
// or more distinct rates.
func fitCost(ordersPerSec, cores []float64) (costFit, error) {
	if len(ordersPerSec) != len(cores) {
		return costFit{}, fmt.Errorf("%d rates but %d CPU figures", len(ordersPerSec), len(cores))
	}
	if len(cores) < 2 {
		return costFit{}, fmt.Errorf("fitting CPU against the rate needs two or more distinct rates, got %v", ordersPerSec)
	}
	n := float64(len(cores))
	var sx, sy float64
	for i := range cores {
		sx += ordersPerSec[i]
		sy += cores[i]
	}
	mx, my := sx/n, sy/n
	var sxx, sxy float64
	for i := range cores {
		dx := ordersPerSec[i] - mx
		sxx += dx * dx
		sxy += dx * (cores[i] - my)
	}
	if sxx == 0 {
		return costFit{}, fmt.Errorf("fitting CPU against the rate needs two or more distinct rates, got %v", ordersPerSec)
	}
	slope := sxy / sxx
	return costFit{PerOrder: slope, BaseCores: my - slope*mx}, nil
}

// describe writes the fit as "<slope> <unit> + <intercept> cores at any
// rate", the slope in CPU seconds per order times scale.
func (f costFit) describe(scale float64, unit string) string {
	return fmt.Sprintf("%.3f %s + %.2f cores at any rate", f.PerOrder*scale, unit, f.BaseCores)
}

// e2eWindowName is the CPU-by-phase name of one end-to-end rate's window.
func e2eWindowName(rate int) string { return fmt.Sprintf("end to end, %d/s", rate) }

// fitComponentCosts fits each component's CPU in the end-to-end windows
// against the rate achieved in them. Components missing from a window (it
// used under the sampling's resolution) count 0 cores there.
func fitComponentCosts(rates []rateResult, windows []phaseCPU, components []string) (map[string]costFit, error) {
	byName := make(map[string]phaseCPU, len(windows))
	for _, w := range windows {
		byName[w.Phase] = w
	}
	x := make([]float64, 0, len(rates))
	y := make(map[string][]float64, len(components))
	for _, rr := range rates {
		w, ok := byName[e2eWindowName(rr.OfferedPerSec)]
		if !ok {
			return nil, fmt.Errorf("no CPU window for %d orders/s", rr.OfferedPerSec)
		}
		x = append(x, rr.Load.PerSecond)
		for _, c := range components {
			y[c] = append(y[c], w.Cores[c])
		}
	}
	out := make(map[string]costFit, len(components))
	for _, c := range components {
		f, err := fitCost(x, y[c])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c, err)
		}
		out[c] = f
	}
	return out, nil
}
