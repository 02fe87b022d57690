package node

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestMemTableSizeSharesTheBudget(t *testing.T) {
	for _, c := range []struct {
		budget int64
		n      int
		want   uint64
	}{
		{256 << 20, 0, 32 << 20}, {256 << 20, 3, 32 << 20}, {256 << 20, 8, 32 << 20},
		{256 << 20, 64, 4 << 20}, {256 << 20, 1024, 2 << 20}, {1 << 30, 16, 32 << 20},
	} {
		if got := memTableSize(c.budget, c.n); got != c.want {
			t.Errorf("memTableSize(%d, %d) = %d, want %d", c.budget, c.n, got, c.want)
		}
	}
}

// TestCreatingAManyShardDatabaseDoesNotStallOthers: opening the replicas
// of a new 256-shard database takes seconds; writes to another database
// go on meanwhile (they were held until the node counted as current
// again, and answered 503 NodeCatchingUp past 2 s), and the new shards'
// write-ahead logs reserve their share of the memtable budget on disk, not
// 35 MiB each.
func TestCreatingAManyShardDatabaseDoesNotStallOthers(t *testing.T) {
	dir := t.TempDir()
	n := testNode(t, dir)
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/busy", `{"Shards": 1}`)
	c.must(201, "PUT", "/databases/busy/docs?id=warm", `{}`)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var slowest atomic.Int64
	var failed atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			req, _ := http.NewRequest("PUT", fmt.Sprintf("%s/databases/busy/docs?id=w/%d", n.HTTPURL(), i), strings.NewReader(`{}`))
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				failed.Store(err.Error())
				return
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 201 {
				failed.Store(fmt.Sprintf("%d %s", res.StatusCode, body))
			}
			if d := time.Since(start); d.Nanoseconds() > slowest.Load() {
				slowest.Store(d.Nanoseconds())
			}
		}
	}()
	c.must(201, "PUT", "/admin/databases/wide", `{"Shards": 256}`)
	var cmds []string
	for i := 0; i < 400; i++ { // some in most shards
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"x/%d","Document":{}}`, i))
	}
	c.must(201, "POST", "/databases/wide/bulk_docs", `{"Commands":[`+strings.Join(cmds, ",")+`]}`)
	close(stop)
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatalf("a write to another database failed while the wide one was created: %v", f)
	}
	t.Logf("slowest write to the other database during the create: %v", time.Duration(slowest.Load()))

	// Each written shard's log reserves ~1.1 x 2 MiB (256 MiB / 257 replicas
	// is below the floor), not 1.1 x 32 MiB.
	var disk int64
	err := filepath.WalkDir(filepath.Join(dir, "databases", "wide"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if st, err := os.Stat(path); err == nil {
			disk += blocksOf(st)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if limit := int64(256 * 4 << 20); disk > limit {
		t.Fatalf("256 shards of a few small documents take %d MiB on disk, more than %d MiB", disk>>20, limit>>20)
	}
	t.Logf("256 shards of a few small documents take %d MiB on disk", disk>>20)
}

// TestReplicaThatFailedToOpenIsRetried: out of file descriptors, some
// replicas of a new database do not open; /healthz names the failure, a
// write to such a shard says why it cannot be served, and once descriptors
// are free again the node opens them without waiting for a raft apply.
func TestReplicaThatFailedToOpenIsRetried(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	// Room for the client's connections and ~3 replicas, not 40.
	tight := lim
	tight.Cur = uint64(len(fds) + 40)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &tight); err != nil {
		t.Skip(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer restore()
	c.must(201, "PUT", "/admin/databases/many", `{"Shards": 40}`)
	failing, example := n.replicas.failures() // no descriptor needed
	rec := httptest.NewRecorder()
	n.handleHealth(rec, httptest.NewRequest("GET", "/healthz", nil))
	restore()
	if !strings.Contains(rec.Body.String(), `"ReplicasFailing"`) {
		t.Errorf("/healthz does not name the failing replicas: %s", rec.Body)
	}
	if failing == 0 {
		t.Fatalf("with %d descriptors, 40 replicas opened", tight.Cur)
	}
	t.Logf("%v replicas failed to open: %v", failing, example)
	// /healthz names the failure until the retry (1 s later) opens them.
	deadline := time.Now().Add(20 * time.Second)
	for {
		h := c.do("GET", "/healthz", "").json(t)
		if h["ReplicasFailing"] == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas still failing 20 s after descriptors were freed: %v", h)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var cmds []string
	for i := 0; i < 400; i++ {
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"x/%d","Document":{}}`, i))
	}
	c.must(201, "POST", "/databases/many/bulk_docs", `{"Commands":[`+strings.Join(cmds, ",")+`]}`)
}

func TestShardListWritesRanges(t *testing.T) {
	for in, want := range map[string]string{"": "", "0": "0", "0,1,2,3,7": "0-3,7", "1,3,4,9,10,11": "1,3-4,9-11"} {
		var shards []int
		for _, f := range strings.Split(in, ",") {
			if f != "" {
				var v int
				fmt.Sscan(f, &v)
				shards = append(shards, v)
			}
		}
		if got := shardList(shards); got != want {
			t.Errorf("shardList(%v) = %q, want %q", shards, got, want)
		}
	}
}
