package node

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/shardnode/shardnode/bucket"
)

// scrape reads a node's /metrics.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", res.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// metricValue returns the value of the metric name with labels (pairs of
// name and value): a gauge's or counter's value, a histogram's or
// summary's count.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	m := findMetric(fams, name, labels...)
	switch {
	case m == nil:
		return 0, false
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount()), true
	case m.Summary != nil:
		return float64(m.Summary.GetSampleCount()), true
	}
	return 0, false
}

// histogramSum returns the sum of the observations of the histogram name
// with labels, 0 if there is none.
func histogramSum(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	if m := findMetric(fams, name, labels...); m != nil && m.Histogram != nil {
		return m.Histogram.GetSampleSum()
	}
	return 0
}

// findMetric returns the first metric of family name that has labels
// (pairs of name and value), or nil.
func findMetric(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		return m
	}
	return nil
}

// TestMetricsFollowWritesAndAMove writes documents, moves their bucket
// and reads /metrics: the requests by route and status, the replicas'
// documents and group commits, raft's state, and the move's phases and
// duration are there with the values the test caused, and nothing is
// left counted as in flight. A second move runs while /events streams
// through the instrumented handler, which must still flush each event.
func TestMetricsFollowWritesAndAMove(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	const docs = 12
	for i := range docs {
		c.must(201, "PUT", fmt.Sprintf("/databases/db/docs?id=orders/%d$tenants/7", i), `{"n":1}`)
	}
	c.must(404, "GET", "/databases/db/docs?id=nope", "")

	fams := scrape(t, n.HTTPURL())
	if v, _ := metricValue(fams, "shardnode_http_request_duration_seconds", "route", "PUT /databases/{db}/docs", "code", "201"); v != docs {
		t.Errorf("PUTs answered 201: %v, want %d", v, docs)
	}
	if v, _ := metricValue(fams, "shardnode_http_request_duration_seconds", "route", "GET /databases/{db}/docs", "code", "404"); v != 1 {
		t.Errorf("GETs answered 404: %v, want 1", v)
	}
	if v, _ := metricValue(fams, "shardnode_raft_state", "state", "Leader"); v != 1 {
		t.Errorf("raft state Leader: %v, want 1", v)
	}
	if v, _ := metricValue(fams, "shardnode_node_ready"); v != 1 {
		t.Errorf("node ready: %v", v)
	}
	b := bucket.ForID("tenants/7")
	from := n.fsm.Record
	rec, _ := from("db")
	src := rec.ShardOf(b)
	if v, _ := metricValue(fams, "shardnode_replica_documents", "db", "db", "shard", fmt.Sprint(src)); v != docs {
		t.Errorf("documents on shard %d: %v, want %d", src, v, docs)
	}
	if v, _ := metricValue(fams, "shardnode_replica_committed_writes_total", "db", "db", "shard", fmt.Sprint(src)); v < docs {
		t.Errorf("committed writes on shard %d: %v, want ≥ %d", src, v, docs)
	}

	move := func(to int) {
		t.Helper()
		r := c.must(202, "POST", "/databases/db/resharding", fmt.Sprintf(`{"FromBucket": %d, "ToBucket": %d, "ToShard": %d}`, b, b, to)).json(t)
		id := r["OperationId"].(string)
		waitFor(t, 60*time.Second, "the move to complete", func() bool {
			op := c.must(200, "GET", "/databases/db/resharding/"+id, "").json(t)
			return op["Status"] == "Completed"
		})
	}
	move(1 - src)

	// The second move back runs while an event stream is open.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", n.HTTPURL()+"/databases/db/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	move(src)
	sc := bufio.NewScanner(res.Body)
	for sawCompleted := false; !sawCompleted && sc.Scan(); {
		sawCompleted = strings.Contains(sc.Text(), `"Step":"Completed"`)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("event stream: %v", err)
	}

	// The completions are observed when the node applies them; the
	// operation's status can be read a moment before the observer runs.
	waitFor(t, 10*time.Second, "both migrations in the histogram", func() bool {
		v, _ := metricValue(scrape(t, n.HTTPURL()), "shardnode_migration_duration_seconds", "db", "db")
		return v == 2
	})
	fams = scrape(t, n.HTTPURL())
	for _, phase := range []string{"send", "confirm", "cleanup"} {
		if v, _ := metricValue(fams, "shardnode_migration_phase_duration_seconds", "db", "db", "phase", phase); v != 2 {
			t.Errorf("phase %s observed %v times, want 2", phase, v)
		}
	}
	// Each move's sender made one last pass after its flip (the record
	// shows the pass before the move completes).
	for _, step := range []string{"fence_writes", "fence_peers", "send", "total"} {
		if v, _ := metricValue(fams, "shardnode_last_pass_step_duration_seconds", "db", "db", "step", step); v != 2 {
			t.Errorf("last pass step %s observed %v times, want 2", step, v)
		}
	}
	lp, _ := c.must(200, "GET", "/databases/db/stats", "").json(t)["LastPasses"].(map[string]any)
	if lp["Passes"] != 2.0 || lp["Node"] != "A" || lp["TotalMaxMs"].(float64) <= 0 {
		t.Errorf("stats' LastPasses: %v, want 2 passes by A that took some time", lp)
	}
	// The pass stores a batch (a synced write), or, with nothing new,
	// announces it: it takes some time, and never more than the whole.
	// The metric keeps nanoseconds; the stats show whole microseconds, and
	// on a quiet machine a pass that sends nothing new takes less than one
	// (a whole pass of 18 µs was seen).
	if s := histogramSum(fams, "shardnode_last_pass_step_duration_seconds", "db", "db", "step", "send"); s <= 0 || s > histogramSum(fams, "shardnode_last_pass_step_duration_seconds", "db", "db", "step", "total") {
		t.Errorf("last pass step send took %v s in all, want more than 0 and at most the total's", s)
	}
	if s, _ := lp["SendP99Ms"].(float64); s < 0 || s > lp["TotalP99Ms"].(float64) {
		t.Errorf("stats' LastPasses: send p99 %v ms, want at most the total's %v", lp["SendP99Ms"], lp["TotalP99Ms"])
	}
	for _, k := range []string{"FenceWritesP50Ms", "FenceWritesP99Ms", "SendP50Ms"} {
		if _, ok := lp[k].(float64); !ok {
			t.Errorf("stats' LastPasses lack %s: %v", k, lp)
		}
	}
	for _, st := range []string{"Moving", "Moved", "OwnershipTransferred"} {
		if v, ok := metricValue(fams, "shardnode_migrations", "db", "db", "status", st); !ok || v != 0 {
			t.Errorf("migrations %s: %v (reported %v), want 0", st, v, ok)
		}
	}
	if v, _ := metricValue(fams, "shardnode_resharding_operations", "db", "db", "status", "Completed"); v != 2 {
		t.Errorf("completed operations: %v, want 2", v)
	}
	if v, _ := metricValue(fams, "shardnode_resharding_buckets_remaining", "db", "db"); v != 0 {
		t.Errorf("buckets remaining: %v", v)
	}
	if v, _ := metricValue(fams, "shardnode_replica_documents", "db", "db", "shard", fmt.Sprint(src)); v != docs {
		t.Errorf("documents back on shard %d: %v, want %d", src, v, docs)
	}
	if v, _ := metricValue(fams, "shardnode_replica_documents", "db", "db", "shard", fmt.Sprint(1-src)); v != 0 {
		t.Errorf("documents left on shard %d: %v, want 0", 1-src, v)
	}

	// While the node replays the log (not ready), its records are of the
	// past: no migration or operation series.
	n.ready.Store(false)
	fams = scrape(t, n.HTTPURL())
	n.ready.Store(true)
	if _, ok := metricValue(fams, "shardnode_migrations", "db", "db", "status", "Moving"); ok {
		t.Error("migration series from a node that is not ready")
	}
	if v, _ := metricValue(fams, "shardnode_node_ready"); v != 0 {
		t.Errorf("node ready %v while not ready", v)
	}

	// A deleted database's series go with it.
	c.must(204, "DELETE", "/admin/databases/db", "")
	waitFor(t, 10*time.Second, "the deleted database's series to go", func() bool {
		_, ok := metricValue(scrape(t, n.HTTPURL()), "shardnode_replica_documents", "db", "db")
		return !ok
	})
}
