package storage

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkConcurrentDurableWrites measures single-document durable writes
// from 64 goroutines over 3 stores (one node's 3 shards), the storage part
// of the API's PUT. Compare with a raw Pebble synced Set per write (the
// bench command's baseline).
const benchWriters = 64

func BenchmarkConcurrentDurableWrites(b *testing.B) {
	var stores []*Store
	for i := 0; i < 3; i++ {
		s, err := Open(Options{Dir: b.TempDir(), NodeTag: "A"})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	body := []byte(`{"f":"` + strings.Repeat("x", 1000) + `"}`)
	var n atomic.Int64
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), processCPU()
	per := b.N/benchWriters + 1
	for w := 0; w < benchWriters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%3]
			for i := 0; i < per; i++ {
				if _, err := s.Write(context.Background(), []Op{{Kind: OpPut, ID: fmt.Sprintf("w%d/%d", w, i), Body: body}}); err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	el, cpu := time.Since(start), processCPU()-cpu0
	b.ReportMetric(float64(n.Load())/el.Seconds(), "writes/s")
	// CPU per write is steadier than throughput on a shared machine.
	b.ReportMetric(float64(cpu.Microseconds())/float64(n.Load()), "cpu-us/write")
	var c, ops uint64
	var sync float64
	for _, s := range stores {
		st := s.Stats()
		c += st.Commits
		ops += st.CommittedOps
		sync += st.SyncMillis
	}
	b.ReportMetric(float64(ops)/float64(c), "ops/commit")
	b.ReportMetric(sync/float64(c), "sync-ms/commit")
}

// processCPU is the process's user plus system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
