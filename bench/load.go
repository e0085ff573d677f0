package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	eventforgev1 "github.com/eventforge/eventforge/proto/eventforge/v1"
)

// creator creates one order; implementations are safe for concurrent use.
type creator func(ctx context.Context, customer string) error

func grpcCreator(addr string, conns int) (creator, func(), error) {
	var clients []eventforgev1.OrderServiceClient
	var closers []*grpc.ClientConn
	for range conns {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, fmt.Errorf("dialing %s: %w", addr, err)
		}
		closers = append(closers, conn)
		clients = append(clients, eventforgev1.NewOrderServiceClient(conn))
	}
	var next atomic.Uint64
	create := func(ctx context.Context, customer string) error {
		c := clients[next.Add(1)%uint64(len(clients))]
		_, err := c.CreateOrder(ctx, &eventforgev1.CreateOrderRequest{
			CustomerId: customer, Currency: "EUR",
			Items: []*eventforgev1.OrderItem{{Sku: "SKU-1", Quantity: 2, UnitPriceCents: 1999}},
		})
		return err
	}
	return create, func() {
		for _, c := range closers {
			c.Close()
		}
	}, nil
}

func restCreator(addr string, conns int) creator {
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns}, Timeout: 30 * time.Second}
	url := "http://" + addr + "/v1/orders"
	return func(ctx context.Context, customer string) error {
		body := fmt.Sprintf(`{"customer_id":%q,"currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price_cents":1999}]}`, customer)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST /v1/orders: %s", resp.Status)
		}
		return nil
	}
}

// loadResult summarises one load run.
type loadResult struct {
	Requests  int           `json:"requests"`
	Errors    int           `json:"errors"`
	Duration  time.Duration `json:"duration_ns"`
	PerSecond float64       `json:"per_second"`
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
	Late      int           `json:"late,omitempty"` // open loop: sends that could not start on time
	// FirstError is the first failure's message, to say what the errors were.
	FirstError string `json:"first_error,omitempty"`
}

// closedLoop runs clients workers, each sending its next request when the
// previous one answered, until d has passed. Requests in flight at the end
// are waited for and counted: cutting them off would count them as
// failures of the system under test.
func closedLoop(ctx context.Context, create creator, clients int, d time.Duration, customer string) loadResult {
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs      int
		firstErr  error
		wg        sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			var localErrs int
			var localErr error
			for ctx.Err() == nil && time.Now().Before(end) {
				t0 := time.Now()
				if err := create(ctx, customer); err != nil {
					if ctx.Err() == nil {
						localErrs++
						if localErr == nil {
							localErr = err
						}
					}
					continue
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			latencies = append(latencies, local...)
			errs += localErrs
			if firstErr == nil {
				firstErr = localErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	r := summarize(latencies, errs, time.Since(start))
	if firstErr != nil {
		r.FirstError = firstErr.Error()
	}
	return r
}

// loadTick is how often the open loop releases the requests that fell due.
// One timer wakeup per tick instead of one per request costs the load
// generator less CPU per order, CPU the measured processes get back on a
// small machine (docs/bench.md); the price is arrivals in groups of up to
// rate × loadTick (5 at 1,000/s).
const loadTick = 5 * time.Millisecond

// openLoop sends rate requests per second for d regardless of answers (up
// to maxInflight outstanding), so a slow system shows up as latency, not as a
// lower offered load. Request i falls due at i/rate; every loadTick the
// requests due by then are sent.
func openLoop(ctx context.Context, create creator, rate int, d time.Duration, customer string, maxInflight int) loadResult {
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs      int
		late      int
		wg        sync.WaitGroup
	)
	sem := make(chan struct{}, maxInflight)
	send := func() {
		select {
		case sem <- struct{}{}:
		default:
			late++
			sem <- struct{}{}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t0 := time.Now()
			err := create(ctx, customer)
			mu.Lock()
			if err != nil {
				errs++
			} else {
				latencies = append(latencies, time.Since(t0))
			}
			mu.Unlock()
		}()
	}
	interval := time.Second / time.Duration(rate)
	tick := time.NewTicker(loadTick)
	defer tick.Stop()
	start := time.Now()
	total := int(d / interval)
	for i := 0; i < total; {
		now := time.Now()
		for ; i < total && !start.Add(time.Duration(i)*interval).After(now); i++ {
			send()
		}
		if i < total {
			<-tick.C
		}
	}
	wg.Wait()
	r := summarize(latencies, errs, time.Since(start))
	r.Late = late
	return r
}

func summarize(lat []time.Duration, errs int, d time.Duration) loadResult {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return loadResult{
		Requests: len(lat), Errors: errs, Duration: d,
		PerSecond: float64(len(lat)) / d.Seconds(),
		P50:       percentile(lat, 0.50), P99: percentile(lat, 0.99),
	}
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}
