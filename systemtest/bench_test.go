package systemtest

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// Cluster benchmarks: run with
//
//	go test ./systemtest -run XXX -bench . -benchtime 1x
//
// Each measures for a fixed time and reports its figures as metrics; ratios
// compare two loads measured in the same run.

func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	i := int(float64(len(d)-1) * p)
	return float64(d[i].Microseconds()) / 1000
}

// load runs clients goroutines calling op until dur passes and returns the
// completed count and every latency.
func load(clients int, dur time.Duration, op func(w, i int) error) (int64, []time.Duration, error) {
	var n atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := 0; time.Now().Before(deadline); i++ {
				start := time.Now()
				if err := op(w, i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(start))
				n.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return n.Load(), lat, firstErr
}

// BenchmarkReplicationLag measures how long after a write is acknowledged
// by one replica the other replica of its shard serves it, while 8 other
// clients write continuously to the same shard.
func BenchmarkReplicationLag(b *testing.B) {
	c := testcluster.Start(b, testcluster.Options{Nodes: 2})
	testcluster.Must(b, 201, "PUT", c.URL(0)+"/admin/databases/db", `{"Shards":1,"ReplicationFactor":2}`)
	stop := make(chan struct{})
	var bg atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := testcluster.Expect(201, "PUT", fmt.Sprintf("%s/databases/db/docs?id=bg%d/%d", c.URL(0), w, i%1000), `{"payload":"0123456789012345678901234567890123456789"}`); err == nil {
					bg.Add(1)
				}
			}
		}()
	}
	var lags []time.Duration
	start := time.Now()
	for i := 0; i < 300; i++ {
		id := fmt.Sprintf("probe/%d", i)
		testcluster.Must(b, 201, "PUT", c.URL(0)+"/databases/db/docs?id="+id, `{"v":1}`)
		acked := time.Now()
		for {
			r, err := testcluster.Do("GET", c.URL(1)+"/databases/db$0/docs?id="+id, "")
			if err == nil && r.Status == 200 {
				break
			}
		}
		lags = append(lags, time.Since(acked))
		time.Sleep(10 * time.Millisecond) // a probe every ~10 ms
	}
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(bg.Load())/elapsed.Seconds(), "bg-writes/s")
	b.ReportMetric(percentile(lags, 0.5), "lag-p50-ms")
	b.ReportMetric(percentile(lags, 0.99), "lag-p99-ms")
}

// BenchmarkWaitForReplicas compares durable PUT throughput from 64 clients
// with waitForReplicas=2 against waitForReplicas=1, same cluster, same run.
func BenchmarkWaitForReplicas(b *testing.B) {
	c := testcluster.Start(b, testcluster.Options{Nodes: 3})
	testcluster.Must(b, 201, "PUT", c.URL(0)+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	run := func(w int) (float64, float64) {
		n, lat, err := load(64, 3*time.Second, func(cl, i int) error {
			_, err := testcluster.Expect(201, "PUT", fmt.Sprintf("%s/databases/db/docs?id=c%d/%d&waitForReplicas=%d", c.URL(cl%3), cl, i%500, w), `{"payload":"0123456789012345678901234567890123456789"}`)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		return float64(n) / 3, percentile(lat, 0.99)
	}
	ops1, p99a := run(1)
	ops2, p99b := run(2)
	b.ReportMetric(ops1, "w1-ops/s")
	b.ReportMetric(ops2, "w2-ops/s")
	b.ReportMetric(ops2/ops1, "w2/w1")
	b.ReportMetric(p99a, "w1-p99-ms")
	b.ReportMetric(p99b, "w2-p99-ms")
}

// BenchmarkRoutedGet compares a GET through the node that holds the shard
// with the same GET through a node that routes it over NATS.
func BenchmarkRoutedGet(b *testing.B) {
	c := testcluster.Start(b, testcluster.Options{Nodes: 2})
	testcluster.Must(b, 201, "PUT", c.URL(0)+"/admin/databases/db", `{"Shards":1,"ReplicationFactor":1}`)
	for i := 0; i < 100; i++ {
		testcluster.Must(b, 201, "PUT", fmt.Sprintf("%s/databases/db/docs?id=d/%d", c.URL(0), i), `{"payload":"0123456789012345678901234567890123456789"}`)
	}
	run := func(url string) (float64, float64, float64) {
		n, lat, err := load(16, 2*time.Second, func(_, i int) error {
			_, err := testcluster.Expect(200, "GET", fmt.Sprintf("%s/databases/db/docs?id=d/%d", url, i%100), "")
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		return float64(n) / 2, percentile(lat, 0.5), percentile(lat, 0.99)
	}
	ownOps, ownP50, ownP99 := run(c.URL(0))
	rOps, rP50, rP99 := run(c.URL(1))
	b.ReportMetric(ownOps, "owner-ops/s")
	b.ReportMetric(ownP50, "owner-p50-ms")
	b.ReportMetric(ownP99, "owner-p99-ms")
	b.ReportMetric(rOps, "routed-ops/s")
	b.ReportMetric(rP50, "routed-p50-ms")
	b.ReportMetric(rP99, "routed-p99-ms")
}
