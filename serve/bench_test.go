package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkServeStepOverhead is the service's cost per agent step with an
// engine that answers at once: HTTP request and response, JSON, admission,
// the rollout pool, the agent loop, tokenising and the environment, divided
// by the steps (policy calls) played. Reported as ns/step.
func BenchmarkServeStepOverhead(b *testing.B) {
	eng := &fakeEngine{n: 6}
	f := &testFactory{eng: eng}
	s, err := New(Config{MaxInFlight: 64, MaxQueue: 1024, Agent: testAgentConfig()}, f)
	if err != nil {
		b.Fatal(err)
	}
	f.m = s.Metrics()
	hs := httptest.NewServer(s)
	defer hs.Close()
	b.ResetTimer()
	start := eng.calls.Load()
	for i := range b.N {
		resp, out, err := post(context.Background(), hs.URL, body("count", int64(i)))
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("%v %s", err, out)
		}
	}
	steps := eng.calls.Load() - start
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/step")
	b.ReportMetric(float64(steps)/float64(b.N), "steps/episode")
}

// BenchmarkServeInFlight measures how many episodes one process keeps in
// flight against a fast fake engine (each call answers after 20 ms, as a
// remote engine would, using no CPU here): N concurrent clients each play
// one long episode; reported are the peak episodes in flight, the steps
// per second and the memory per episode. Run with -cpu 2.
func BenchmarkServeInFlight(b *testing.B) {
	const n = 1000
	for range b.N {
		eng := &fakeEngine{n: 6, delay: 20 * time.Millisecond}
		f := &testFactory{eng: eng}
		s, err := New(Config{MaxInFlight: n, MaxQueue: 0, Agent: testAgentConfig()}, f)
		if err != nil {
			b.Fatal(err)
		}
		f.m = s.Metrics()
		hs := httptest.NewServer(s)
		tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0}
		cl := &http.Client{Transport: tr}
		var ms0, ms1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		start := time.Now()
		c0 := eng.calls.Load()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := strings.Replace(body("count", int64(i)), `"keep_last":2`, `"keep_last":2,"max_turns":60`, 1)
				b = strings.Replace(b, `"task_id":"count"`, `"task_id":"long"`, 1)
				resp, err := cl.Post(hs.URL+"/v1/rollouts", "application/json", strings.NewReader(b))
				if err != nil {
					errs <- err
					return
				}
				var r Response
				err = json.NewDecoder(resp.Body).Decode(&r)
				resp.Body.Close()
				if err == nil && (resp.StatusCode != 200 || r.Status != "overlong") {
					err = fmt.Errorf("status %d episode %s %s", resp.StatusCode, r.Status, r.Error)
				}
				if err != nil {
					errs <- err
				}
			}()
		}
		peak := int64(0)
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				if v := s.Metrics().InFlight(); v > peak {
					peak = v
					if v == n {
						runtime.ReadMemStats(&ms1)
					}
				}
			}
		}()
		wg.Wait()
		close(stop)
		el := time.Since(start)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		steps := eng.calls.Load() - c0
		b.ReportMetric(float64(peak), "peak-in-flight")
		b.ReportMetric(float64(steps)/el.Seconds(), "steps/s")
		if ms1.HeapAlloc > 0 {
			b.ReportMetric(float64(ms1.HeapAlloc-ms0.HeapAlloc)/n/1024, "KiB/episode")
		}
		hs.Close()
		tr.CloseIdleConnections()
	}
}
