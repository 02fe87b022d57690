package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"
)

// expectedRows is every row a full selection must produce, spelled out here
// rather than derived from the code under test.
func expectedRows() [][2]string {
	return [][2]string{
		{"bulk-insert", "shardnode"}, {"bulk-insert", "pebble"}, {"bulk-insert", "postgresql"},
		{"put", "shardnode"}, {"put", "pebble"}, {"put", "postgresql"},
		{"get", "shardnode"}, {"get", "pebble"}, {"get", "postgresql"}, {"get", "go-http"}, {"get", "go-fasthttp"},
		{"ycsb-a", "shardnode"}, {"ycsb-a", "pebble"}, {"ycsb-a", "postgresql"},
		{"ycsb-b", "shardnode"}, {"ycsb-b", "pebble"}, {"ycsb-b", "postgresql"},
		{"ycsb-c", "shardnode"}, {"ycsb-c", "pebble"}, {"ycsb-c", "postgresql"},
		{"ycsb-d", "shardnode"}, {"ycsb-d", "pebble"}, {"ycsb-d", "postgresql"},
		{"ycsb-e", "shardnode"}, {"ycsb-e", "pebble"}, {"ycsb-e", "postgresql"},
		{"ycsb-f", "shardnode"}, {"ycsb-f", "pebble"}, {"ycsb-f", "postgresql"},
		{"nats-request", "nats"}, {"nats-publish", "nats"},
		{"rss", "shardnode"},
		{"reshard-small-buckets", "shardnode"},
		{"reshard-two-sources", "shardnode"}, {"reshard-two-sources", "one-source"},
		{"reshard-bulk-transfer", "shardnode"}, {"reshard-bulk-transfer", "shardnode-rf1"}, {"reshard-bulk-transfer", "pebble"},
		{"reshard-foreground", "shardnode"}, {"reshard-foreground", "no-move"},
		{"reshard-foreground-open-loop", "shardnode"}, {"reshard-foreground-open-loop", "no-move"},
		{"reshard-bulk-foreground", "shardnode"}, {"reshard-bulk-foreground", "no-move"},
		{"reshard-bulk-foreground-paced", "shardnode"}, {"reshard-bulk-foreground-paced", "no-move"},
		{"reshard-sparse-range", "shardnode"}, {"reshard-sparse-range", "no-move"},
	}
}

// TestQuickRunProducesEveryRow runs the quick mode in-process, with even
// smaller counts, and checks that every row is there with figures, the
// resharding rows included (each on its own 3-node cluster). It asserts no
// speed. Set SHARDNODE_BENCH_PG to a PostgreSQL URL to include
// the PostgreSQL rows; without it they must say they were skipped.
func TestQuickRunProducesEveryRow(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node and runs every workload")
	}
	pg := os.Getenv("SHARDNODE_BENCH_PG")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, Options{
		Quick: true, Dir: t.TempDir(), PG: pg, Progress: &progress,
		Clients: 16, Records: 500, Ops: 400, ScanRecords: 200, ScanOps: 20,
		BulkDocs: 1000, BatchSize: 250, NATSMessages: 2000, RSSDocs: 500,
	})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	if len(rep.Rows) != len(expectedRows()) {
		t.Errorf("%d rows, want %d", len(rep.Rows), len(expectedRows()))
	}
	for _, want := range expectedRows() {
		row, ok := rep.Row(want[0], want[1])
		switch {
		case !ok:
			t.Errorf("no row %s/%s", want[0], want[1])
		case row.Error != "":
			t.Errorf("row %s/%s failed: %s", want[0], want[1], row.Error)
		case want[1] == "postgresql" && pg == "":
			if row.Skipped == "" {
				t.Errorf("row %s/postgresql without --pg: not marked skipped", want[0])
			}
		case !row.Measured() || row.OpsPerSec <= 0:
			t.Errorf("row %s/%s has no figures: %+v", want[0], want[1], row)
		}
	}
	if row, _ := rep.Row("rss", "shardnode"); row.PeakRSSMiB <= 0 {
		t.Errorf("rss row without a peak RSS: %+v", row)
	}
	for _, sys := range []string{"go-http", "go-fasthttp"} {
		if row, _ := rep.Row("get", sys); row.VsOps <= 0 {
			t.Errorf("get/%s row without a ratio: %+v", sys, row)
		}
	}
	// The resharding rows: their own figures and their ratios are there
	// (never a speed).
	for _, w := range []string{"reshard-small-buckets", "reshard-bulk-transfer", "reshard-foreground", "reshard-foreground-open-loop", "reshard-sparse-range"} {
		if row, _ := rep.Row(w, "shardnode"); row.Reshard == nil || row.Reshard.DocumentsMoved <= 0 || row.Reshard.BytesMoved <= 0 {
			t.Errorf("%s/shardnode row without resharding figures: %+v", w, row)
		}
	}
	if row, _ := rep.Row("reshard-small-buckets", "shardnode"); row.Reshard != nil && (row.Reshard.Timed == 0 || row.Reshard.BucketP50Ms <= 0 || row.Reshard.MsPerBucket <= 0) {
		t.Errorf("reshard-small-buckets row without per-bucket times: %+v", row.Reshard)
	}
	// The sparse range: most of its buckets flipped empty, in bulk.
	if row, _ := rep.Row("reshard-sparse-range", "shardnode"); row.Reshard != nil && (row.Reshard.Buckets == 0 || row.Reshard.EmptyBuckets < 300000) {
		t.Errorf("reshard-sparse-range row: %d buckets moved with data, %d empty flipped, want some and most of shard 0's 349,525", row.Reshard.Buckets, row.Reshard.EmptyBuckets)
	}
	if row, _ := rep.Row("reshard-bulk-transfer", "shardnode"); row.MBPerSec <= 0 {
		t.Errorf("reshard-bulk-transfer/shardnode row without MB/s: %+v", row)
	}
	// Two sources at once move twice the buckets of the one source before
	// them, each phase timed per bucket.
	two, _ := rep.Row("reshard-two-sources", "shardnode")
	one, _ := rep.Row("reshard-two-sources", "one-source")
	if two.Reshard == nil || one.Reshard == nil || two.Reshard.Buckets != 2*one.Reshard.Buckets || one.Reshard.Buckets == 0 ||
		two.Reshard.Timed == 0 || one.Reshard.Timed == 0 || two.Reshard.DocumentsMoved != 2*one.Reshard.DocumentsMoved {
		t.Errorf("reshard-two-sources rows: two sources %+v, one source %+v", two.Reshard, one.Reshard)
	}
	for _, b := range [][2]string{{"reshard-two-sources", "one-source"}, {"reshard-bulk-transfer", "pebble"}, {"reshard-foreground", "no-move"}, {"reshard-foreground-open-loop", "no-move"},
		{"reshard-bulk-foreground", "no-move"}, {"reshard-bulk-foreground-paced", "no-move"}, {"reshard-sparse-range", "no-move"}} {
		if row, _ := rep.Row(b[0], b[1]); row.VsOps <= 0 {
			t.Errorf("%s/%s row without a ratio: %+v", b[0], b[1], row)
		}
	}
	if row, _ := rep.Row("reshard-foreground", "shardnode"); row.Reshard != nil && (row.Reshard.Flips == 0 || row.Reshard.MovingWrites == 0 || row.Reshard.FlipsMeasured == 0) {
		t.Errorf("reshard-foreground row saw no flip, no write into a moving bucket or no write in flight at a flip: %+v", row.Reshard)
	}
	var md, js, txt bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Rows) != len(rep.Rows) {
		t.Errorf("JSON does not round-trip: %v (%d rows)", err, len(back.Rows))
	}
	for _, want := range expectedRows() {
		if !bytes.Contains(md.Bytes(), []byte("`"+want[0]+"`")) {
			t.Errorf("markdown lacks workload %s", want[0])
		}
	}
	t.Logf("\n%s", txt.String())
}

// TestScanQuerySelectsTheRange checks that YCSB E's query, as the shardnode
// client sends it, returns exactly the records of the range, in key order:
// a scan that silently matched nothing would make E meaningless.
func TestScanQuerySelectsTheRange(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := startNode(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	hc := newHTTPClient(4)
	sys := &shardnodeSystem{hc: hc, base: n.HTTPURL(), shards: 3, prefix: "t_"}
	ds, err := sys.dataset(ctx, "scan", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runBulk(ctx, ds, 0, 300, 100, 2, 1); err != nil {
		t.Fatal(err)
	}
	cl, err := ds.client(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, n, want int64 }{{10, 25, 25}, {290, 100, 10}, {0, 1, 1}} {
		if err := cl.scan(ctx, tc.from, int(tc.n)); err != nil {
			t.Fatal(err)
		}
		var res struct {
			Results []struct{ Key int64 }
		}
		if err := json.Unmarshal(cl.(*shardnodeClient).buf.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		if int64(len(res.Results)) != tc.want {
			t.Fatalf("scan from %d, %d: %d results, want %d", tc.from, tc.n, len(res.Results), tc.want)
		}
		for i, r := range res.Results {
			if r.Key != tc.from+int64(i) {
				t.Fatalf("scan from %d: result %d has Key %d", tc.from, i, r.Key)
			}
		}
	}
	// A read finds a loaded record, a missing one fails.
	if err := cl.read(ctx, 299); err != nil {
		t.Fatal(err)
	}
	if err := cl.read(ctx, 300); err == nil {
		t.Fatal("read of a record never loaded succeeded")
	}
	var buf bytes.Buffer
	if err := do(ctx, hc, http.MethodGet, n.HTTPURL()+"/databases/t_scan/docs?id="+keyName(7), nil, http.StatusOK, &buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"Key":7,`)) || !bytes.Contains(buf.Bytes(), []byte(`"@collection":"usertable"`)) {
		t.Fatalf("stored record: %s", buf.String())
	}
	if err := ds.drop(ctx); err != nil {
		t.Fatal(err)
	}
}
