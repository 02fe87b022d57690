package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// TestMain lets a test run the real main (and so see its exit status) by
// re-executing the test binary with SHARDNODE_RUN_MAIN=1.
func TestMain(m *testing.M) {
	if os.Getenv("SHARDNODE_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeAPI fakes the node's resharding and buckets API.
type fakeAPI struct {
	t *testing.T

	mu       sync.Mutex
	requests []string // "METHOD path?query"
	body     string   // the last POST body

	// events is what GET /events streams, then it waits for the client to
	// leave; with noStream the route fails instead.
	events   []sseEvent
	noStream bool
	// polls are the successive answers of GET .../resharding/{id}; the last
	// one repeats.
	polls  []operation
	polled int
}

const fakeOpID = "0123456789abcdef"

func newFakeAPI(t *testing.T) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{t: t}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /databases/{db}/resharding", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.body = string(b)
		f.mu.Unlock()
		switch r.PathValue("db") {
		case "busy":
			writeTestJSON(w, http.StatusConflict, map[string]string{"Error": "conflict: operation 99 is already moving buckets 0-10 to shard 1", "Type": "Conflict"})
		case "missing":
			writeTestJSON(w, http.StatusNotFound, map[string]string{"Error": `database "missing" does not exist`, "Type": "DatabaseDoesNotExist"})
		default:
			writeTestJSON(w, http.StatusAccepted, map[string]string{"OperationId": fakeOpID})
		}
	})
	mux.HandleFunc("GET /databases/{db}/events", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		noStream, events := f.noStream, f.events
		f.mu.Unlock()
		if noStream {
			writeTestJSON(w, http.StatusInternalServerError, map[string]string{"Error": "streaming unsupported", "Type": "InternalError"})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, ": hello\n\n")
		for i, ev := range events {
			fmt.Fprintf(w, "event: %s\nid: %d\ndata: %s\n\n", ev.Event, i+1, ev.Data)
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	})
	mux.HandleFunc("GET /databases/{db}/resharding/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.PathValue("id") != fakeOpID || len(f.polls) == 0 {
			writeTestJSON(w, http.StatusNotFound, map[string]string{"Error": "no resharding operation", "Type": "OperationNotFound"})
			return
		}
		op := f.polls[min(f.polled, len(f.polls)-1)]
		f.polled++
		writeTestJSON(w, http.StatusOK, op)
	})
	mux.HandleFunc("GET /databases/{db}/resharding", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, http.StatusOK, reshardingList{
			Operations: []operation{
				{OperationID: "bbbb", FromBucket: 100, ToBucket: 199, ToShard: 1, Status: "Running", BucketsTotal: 100, BucketsDone: 25,
					DocumentsMoved: 1500, BytesMoved: 3 << 20, StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Alerts: []string{"bucket 130 stuck in Moved for 1m1s, waiting for node C to confirm"}},
				{OperationID: "aaaa", FromBucket: 0, ToBucket: 99, ToShard: 2, Status: "Completed", BucketsTotal: 100, BucketsDone: 100,
					DocumentsMoved: 9000, BytesMoved: 12_345_678, StartedAt: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC), EndedAt: time.Date(2026, 1, 2, 3, 0, 42, 0, time.UTC)},
			},
			BucketMigrations: []bucketMigration{
				{Bucket: 130, SourceShard: 0, DestinationShard: 1, Status: "Moved", MigrationIndex: 77, OperationID: "bbbb", InStatusFor: "1m1s", Stuck: true, WaitingFor: []string{"C"}},
				{Bucket: 9000, SourceShard: 2, DestinationShard: 0, Status: "Moving", MigrationIndex: 80, Leftovers: true, InStatusFor: "120ms", Failures: 3, LastError: "nats: timeout"},
			},
		})
	})
	mux.HandleFunc("GET /databases/{db}/buckets", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("db") == "missing" {
			writeTestJSON(w, http.StatusNotFound, map[string]string{"Error": `database "missing" does not exist`, "Type": "DatabaseDoesNotExist"})
			return
		}
		writeTestJSON(w, http.StatusOK, bucketsReport{From: 0, To: 1023, Groups: []reportGroup{
			{From: 0, To: 511, Shards: []int{0}, DocumentsCount: 1000, Size: 4_000_000},
			{From: 512, To: 1023, Shards: []int{0, 2}, DocumentsCount: 10, Size: 1_000_000},
			{From: 1024, To: 2047, Shards: []int{}, DocumentsCount: 0, Size: 0},
		}})
	})
	mux.HandleFunc("GET /databases/{db}/buckets/{bucket}", func(w http.ResponseWriter, r *http.Request) {
		ids := make([]string, 25)
		for i := range ids {
			ids[i] = fmt.Sprintf("users/%02d", i)
		}
		writeTestJSON(w, http.StatusOK, bucketInfo{Bucket: 17, Shards: []int{1}, DocumentsCount: 25, Size: 2500, ChangeVector: "A:25-abc", Documents: ids})
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, strings.TrimSuffix(r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery, "?"))
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return f, srv
}

// configure changes the fake's behaviour while it serves.
func (f *fakeAPI) configure(fn func(f *fakeAPI)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// seen returns the requests served so far and the last POST body.
func (f *fakeAPI) seen() ([]string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...), f.body
}

func writeTestJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// event makes an SSE event with v as JSON data.
func event(t *testing.T, name string, v any) sseEvent {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return sseEvent{Event: name, Data: string(b)}
}

// run runs the shardnode command line with args and returns its output.
func run(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&out)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// moveScript is a move of buckets 0-3 to shard 2 as the event stream tells
// it: a stuck bucket (its alert repeated with a longer time), an error, then
// completion.
func moveScript(t *testing.T) []sseEvent {
	start := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	base := operation{OperationID: fakeOpID, FromBucket: 0, ToBucket: 3, ToShard: 2, Status: "Running", BucketsTotal: 4, StartedAt: start,
		CurrentBuckets: []bucketMigration{}}
	op1 := base
	op1.BucketsDone, op1.DocumentsMoved, op1.BytesMoved = 1, 10, 2048
	op1.CurrentBuckets = []bucketMigration{{Bucket: 2, SourceShard: 0, DestinationShard: 2, Status: "Moving", InStatusFor: "1m5s", Stuck: true}}
	op1.Alerts = []string{"bucket 2 stuck in Moving for 1m5s"}
	op2 := op1
	op2.Alerts = []string{"bucket 2 stuck in Moving for 1m7.5s"}
	op2.Errors = []string{"2026-03-04T05:07:20Z bucket 2: send batch: nats: timeout"}
	done := base
	done.Status, done.BucketsDone, done.DocumentsMoved, done.BytesMoved = "Completed", 4, 40, 8192
	done.EndedAt = start.Add(2 * time.Second)
	done.Errors = op2.Errors
	other := base
	other.OperationID, other.BucketsDone = "someone-else", 3
	return []sseEvent{
		event(t, "operation", base),
		event(t, "operation", other),
		event(t, "migration", migrationEvent{Bucket: 1, SourceShard: 0, DestinationShard: 2, Step: "Moving", OperationID: fakeOpID, MigrationIndex: 10}),
		event(t, "migration", migrationEvent{Bucket: 1, SourceShard: 0, DestinationShard: 2, Step: "Moved", OperationID: fakeOpID, MigrationIndex: 10}),
		event(t, "migration", migrationEvent{Bucket: 7, SourceShard: 1, DestinationShard: 0, Step: "Moving", MigrationIndex: 11}),
		event(t, "operation", op1),
		event(t, "operation", op2),
		event(t, "migration", migrationEvent{Bucket: 2, SourceShard: 0, DestinationShard: 2, Step: "Completed", OperationID: fakeOpID, MigrationIndex: 12}),
		event(t, "operation", done),
	}
}

func TestMoveFollowsEventStream(t *testing.T) {
	f, srv := newFakeAPI(t)
	script := moveScript(t)
	f.configure(func(f *fakeAPI) {
		f.events = script
		f.polls = []operation{{OperationID: fakeOpID, FromBucket: 0, ToBucket: 3, ToShard: 2, Status: "Running", BucketsTotal: 4}}
	})
	out, err := run(t.Context(), "buckets", "move", "--url", srv.URL, "--db", "shop", "--from", "0", "--to", "3", "--shard", "2")
	if err != nil {
		t.Fatalf("move: %v\n%s", err, out)
	}
	if _, body := f.seen(); body != `{"FromBucket":0,"ToBucket":3,"ToShard":2}` {
		t.Errorf("POST body %s", body)
	}
	if strings.Contains(out, "\r") {
		t.Errorf("plain output has a carriage return:\n%q", out)
	}
	for _, want := range []string{
		`Moving buckets 0-3 of "shop" to shard 2: operation ` + fakeOpID,
		"Running 0.0%, 0/4 buckets, 0 docs, 0 B,",
		"Running 25.0%, 1/4 buckets, 10 docs, 2.0 kB,",
		"now: 2 Moving STUCK 1m05s",
		"ALERT bucket 2 stuck in Moving for 1m5s\n",
		"ERROR 2026-03-04T05:07:20Z bucket 2: send batch: nats: timeout\n",
		// The last line's rates are the summary's.
		"Completed 100.0%, 4/4 buckets, 40 docs, 8.2 kB, 2.00 buckets/s 4.1 kB/s, 2.0s",
		"Completed: buckets 0-3 to shard 2 (operation " + fakeOpID + ")",
		"  Buckets     4 of 4 moved\n",
		"  Documents   40\n",
		"  Bytes       8.2 kB\n",
		"  Duration    2.0s\n",
		"  Average     500.00 ms per bucket (2.00 buckets/s)\n",
		"  Throughput  4.1 kB/s\n",
		"  Errors      1 (retried; last: 2026-03-04T05:07:20Z bucket 2: send batch: nats: timeout)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "ALERT bucket"); n != 1 {
		t.Errorf("the stuck alert shows %d times, want once:\n%s", n, out)
	}
	if strings.Contains(out, "someone-else") || strings.Contains(out, "3/4") {
		t.Errorf("output shows another operation:\n%s", out)
	}
	// One line per change: the same progress is not printed twice.
	lines := strings.Split(out, "\n")
	for i := 1; i < len(lines); i++ {
		if lines[i] != "" && lines[i] == lines[i-1] {
			t.Errorf("line %d repeats: %q", i, lines[i])
		}
	}
}

func TestMoveFallsBackToPolling(t *testing.T) {
	f, srv := newFakeAPI(t)
	op := operation{OperationID: fakeOpID, FromBucket: 5, ToBucket: 6, ToShard: 1, Status: "Running", BucketsTotal: 2}
	op1 := op
	op1.BucketsDone, op1.DocumentsMoved, op1.BytesMoved = 1, 3, 300
	op1.CurrentBuckets = []bucketMigration{{Bucket: 6, Status: "Moved"}}
	done := op1
	done.Status, done.BucketsDone, done.CurrentBuckets = "Completed", 2, nil
	f.configure(func(f *fakeAPI) { f.noStream, f.polls = true, []operation{op, op1, op1, done} })
	c, err := newAPIClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	opts := defaultFollowOptions
	opts.pollEvery, opts.refreshEvery = 5*time.Millisecond, 5*time.Millisecond
	opts.plainEvery = 0 // the script's states come milliseconds apart; print each
	var out bytes.Buffer
	mf := moveFlags{nodeFlags: nodeFlags{db: "shop"}, from: 5, to: 6, shard: 1}
	if err := runMove(t.Context(), c, mf, &out, opts); err != nil {
		t.Fatalf("move: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"NOTE event stream unavailable (streaming unsupported (InternalError, HTTP 500)); polling every 5ms\n",
		"Running 50.0%, 1/2 buckets, 3 docs, 300 B,",
		"now: 6 Moved",
		"Completed: buckets 5-6 to shard 1",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	f.configure(func(f *fakeAPI) {
		if f.polled < len(f.polls) {
			t.Errorf("polled %d times, want at least %d", f.polled, len(f.polls))
		}
	})
}

func TestMoveRefused(t *testing.T) {
	f, srv := newFakeAPI(t)
	out, err := run(t.Context(), "buckets", "move", "--url", srv.URL, "--db", "busy", "--from", "0", "--to", "10", "--shard", "1")
	if err == nil {
		t.Fatalf("a 409 succeeded:\n%s", out)
	}
	want := "the node refused the move: conflict: operation 99 is already moving buckets 0-10 to shard 1 (Conflict, HTTP 409)"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	reqs, _ := f.seen()
	for _, r := range reqs {
		if strings.Contains(r, "/events") || strings.Contains(r, "/resharding/") {
			t.Errorf("followed a refused move: %s", r)
		}
	}
}

// TestMoveExitStatus runs the real main, as a user would, and checks its
// exit status and stderr.
func TestMoveExitStatus(t *testing.T) {
	f, srv := newFakeAPI(t)
	script := moveScript(t)
	f.configure(func(f *fakeAPI) { f.events = script })
	mainCmd := func(args ...string) (string, string, int) {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "SHARDNODE_RUN_MAIN=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
	}
	stdout, stderr, code := mainCmd("buckets", "move", "--url", srv.URL, "--db", "busy", "--from", "0", "--to", "10", "--shard", "1")
	if code != 1 || stderr != "shardnode: the node refused the move: conflict: operation 99 is already moving buckets 0-10 to shard 1 (Conflict, HTTP 409)\n" {
		t.Errorf("409: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
	stdout, stderr, code = mainCmd("buckets", "move", "--url", srv.URL, "--db", "shop", "--from", "0", "--to", "3", "--shard", "2")
	if code != 0 || stderr != "" || !strings.Contains(stdout, "Completed: buckets 0-3") {
		t.Errorf("move: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
	_, stderr, code = mainCmd("buckets", "move", "--url", srv.URL, "--db", "shop", "--from", "9", "--to", "3", "--shard", "2")
	if code != 1 || !strings.Contains(stderr, "--from 9 is after --to 3") {
		t.Errorf("bad range: exit %d, stderr %q", code, stderr)
	}
}

func TestMoveValidatesFlagsLocally(t *testing.T) {
	f, srv := newFakeAPI(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--db", "shop", "--from", "0", "--to", "3"}, "missing --shard"},
		{[]string{"--from", "0", "--to", "3", "--shard", "1"}, "missing --db"},
		{[]string{"--db", "shop"}, "missing --from, --to, --shard"},
		{[]string{"--db", "shop", "--from", "5", "--to", "4", "--shard", "1"}, "--from 5 is after --to 4"},
		{[]string{"--db", "shop", "--from", "-1", "--to", "4", "--shard", "1"}, "--from -1: a bucket number is 0..1048575"},
		{[]string{"--db", "shop", "--from", "0", "--to", "1048576", "--shard", "1"}, "--to 1048576: a bucket number is 0..1048575"},
		{[]string{"--db", "shop", "--from", "0", "--to", "1048575", "--shard", "-2"}, "--shard -2: shard numbers start at 0"},
		{[]string{"--db", "shop", "--from", "x", "--to", "4", "--shard", "1"}, `invalid argument "x" for "--from"`},
		{[]string{"--db", "shop", "--from", "0", "--to", "4", "--shard", "1", "--url", "localhost"}, `--url "localhost": want a node's base URL`},
	} {
		args := append([]string{"buckets", "move", "--url", srv.URL}, tc.args...)
		out, err := run(t.Context(), args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q\n%s", tc.args, err, tc.want, out)
		}
	}
	if reqs, _ := f.seen(); len(reqs) > 0 {
		t.Errorf("invalid flags reached the server: %v", reqs)
	}
}

func TestMoveInterrupted(t *testing.T) {
	f, srv := newFakeAPI(t)
	running := operation{OperationID: fakeOpID, FromBucket: 0, ToBucket: 9, ToShard: 1, Status: "Running", BucketsTotal: 10, BucketsDone: 3}
	ev := event(t, "operation", running)
	f.configure(func(f *fakeAPI) { f.events, f.polls = []sseEvent{ev}, []operation{running} })
	ctx, cancel := context.WithCancel(t.Context())
	// Stop following once the stream is being read, as Ctrl-C would.
	go func() {
		for {
			if reqs, _ := f.seen(); len(reqs) >= 3 {
				time.Sleep(50 * time.Millisecond)
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	out, err := run(ctx, "buckets", "move", "--url", srv.URL, "--db", "shop", "--from", "0", "--to", "9", "--shard", "1")
	if !errors.Is(err, errInterrupted) {
		t.Fatalf("error %v, want errInterrupted\n%s", err, out)
	}
	for _, want := range []string{
		"Running 30.0%, 3/10 buckets",
		"Stopped following. Operation " + fakeOpID + " keeps running on the server.",
		"shardnode buckets status --url " + srv.URL + " --db shop --id " + fakeOpID + " --follow",
		"curl -N " + srv.URL + "/databases/shop/events",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Completed") {
		t.Errorf("an interrupted follow printed a summary:\n%s", out)
	}
}

func TestMoveUnknownOperationEnds(t *testing.T) {
	_, srv := newFakeAPI(t) // no polls: every GET of the operation is a 404
	c, _ := newAPIClient(srv.URL)
	opts := defaultFollowOptions
	opts.refreshEvery, opts.notFoundFor = 5*time.Millisecond, 30*time.Millisecond
	var out bytes.Buffer
	err := followOperation(t.Context(), c, "shop", fakeOpID, time.Now(), &out, false, opts)
	var se *serverError
	if !errors.As(err, &se) || se.Type != "OperationNotFound" {
		t.Fatalf("error %v, want OperationNotFound", err)
	}
}

func TestReport(t *testing.T) {
	f, srv := newFakeAPI(t)
	out, err := run(t.Context(), "buckets", "report", "--url", srv.URL, "--db", "shop", "--from", "0", "--to", "2047", "--groups", "3")
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if reqs, _ := f.seen(); reqs[0] != "GET /databases/shop/buckets?from=0&groups=3&to=2047" {
		t.Errorf("request %q", reqs[0])
	}
	want := `Buckets 0-1023 of "shop" in 3 groups

    BUCKETS  SHARDS  DOCUMENTS    SIZE
      0-511       0      1,000  4.0 MB  ####################
   512-1023     0,2         10  1.0 MB  #####
  1024-2047       -          0     0 B
      total              1,010  5.0 MB
`
	if out != want {
		t.Errorf("report:\n%s\nwant:\n%s", out, want)
	}

	out, err = run(t.Context(), "buckets", "report", "--url", srv.URL, "--db", "shop", "--bucket", "17")
	if err != nil {
		t.Fatalf("report --bucket: %v\n%s", err, out)
	}
	for _, want := range []string{"Bucket 17 of \"shop\"\n", "  Shards         1\n", "  Documents      25\n", "  Size           2.5 kB\n",
		"  Change vector  A:25-abc\n", "    users/00\n", "    users/19\n", "    ... and 5 more\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("bucket output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "users/20") {
		t.Errorf("bucket output lists more than 20 ids:\n%s", out)
	}

	_, err = run(t.Context(), "buckets", "report", "--url", srv.URL, "--db", "missing")
	if err == nil || err.Error() != `database "missing" does not exist (DatabaseDoesNotExist, HTTP 404)` {
		t.Errorf("unknown database: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bucket", "3", "--from", "1"}, "--bucket shows one bucket"},
		{[]string{"--groups", "0"}, "--groups 0: give 1..4096"},
		{[]string{"--from", "10", "--to", "9"}, "--from 10 is after --to 9"},
		{[]string{"--bucket", "1048576"}, "--bucket 1048576: a bucket number is 0..1048575"},
	} {
		args := append([]string{"buckets", "report", "--url", srv.URL, "--db", "shop"}, tc.args...)
		if _, err := run(t.Context(), args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestStatus(t *testing.T) {
	f, srv := newFakeAPI(t)
	out, err := run(t.Context(), "buckets", "status", "--url", srv.URL, "--db", "shop")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	for _, want := range []string{
		"OPERATION  BUCKETS  TO SHARD  STATUS     DONE",
		"bbbb       100-199  1         Running    25/100 (25.0%)",
		"aaaa       0-99     2         Completed  100/100 (100.0%)  9,000",
		"12.3 MB",
		"42.0s",
		"130     0     1   Moved   1m1s   77     bbbb         STUCK (waits for C)",
		"9000    2     0   Moving  120ms  80     (leftovers)  3 failures: nats: timeout",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}

	f.configure(func(f *fakeAPI) {
		f.polls = []operation{{OperationID: fakeOpID, FromBucket: 0, ToBucket: 3, ToShard: 2, Status: "Running", BucketsTotal: 4, BucketsDone: 1,
			CurrentBuckets: []bucketMigration{{Bucket: 2, Status: "Moving", InStatusFor: "2s"}}, Alerts: []string{"bucket 2 (Moving) failing: boom"},
			Errors: []string{"2026-03-04T05:07:20Z bucket 2: boom"}}}
	})
	out, err = run(t.Context(), "buckets", "status", "--url", srv.URL, "--db", "shop", "--id", fakeOpID)
	if err != nil {
		t.Fatalf("status --id: %v\n%s", err, out)
	}
	for _, want := range []string{"Operation " + fakeOpID + ": buckets 0-3 to shard 2", "  Buckets     1 of 4 (25.0%)", "Migrating now:",
		"  ALERT bucket 2 (Moving) failing: boom", "  2026-03-04T05:07:20Z bucket 2: boom"} {
		if !strings.Contains(out, want) {
			t.Errorf("status --id lacks %q:\n%s", want, out)
		}
	}
	if _, err := run(t.Context(), "buckets", "status", "--url", srv.URL, "--db", "shop", "--follow"); err == nil || !strings.Contains(err.Error(), "need --id") {
		t.Errorf("--follow without --id: %v", err)
	}
}

func TestStatusFollow(t *testing.T) {
	f, srv := newFakeAPI(t)
	script := moveScript(t)
	f.configure(func(f *fakeAPI) {
		f.events = script
		f.polls = []operation{{OperationID: fakeOpID, FromBucket: 0, ToBucket: 3, ToShard: 2, Status: "Running", BucketsTotal: 4}}
	})
	out, err := run(t.Context(), "buckets", "status", "--url", srv.URL, "--db", "shop", "--id", fakeOpID, "--follow")
	if err != nil || !strings.Contains(out, "Completed: buckets 0-3 to shard 2") || strings.Contains(out, "Moving buckets") {
		t.Errorf("status --follow: %v\n%s", err, out)
	}
}

func TestHelpHasExamples(t *testing.T) {
	for _, sub := range []string{"move", "report", "status"} {
		out, err := run(t.Context(), "buckets", sub, "--help")
		if err != nil || !strings.Contains(out, "Examples:") || !strings.Contains(out, "shardnode buckets "+sub+" ") || !strings.Contains(out, "--url string") {
			t.Errorf("buckets %s --help: %v\n%s", sub, err, out)
		}
	}
}

// sampleView is a progress state for the rendering tests.
func sampleView() progressView {
	return progressView{
		Op: operation{OperationID: fakeOpID, Status: "Running", BucketsTotal: 2001, BucketsDone: 1750, DocumentsMoved: 123456, BytesMoved: 56_700_000,
			CurrentBuckets: []bucketMigration{
				{Bucket: 530, Status: "Moved", Stuck: true, InStatusFor: "1m5.2s"},
				{Bucket: 17, Status: "Moving", Failures: 2},
				{Bucket: 900, Status: "OwnershipTransferred"},
				{Bucket: 901, Status: "Moving"},
			},
			Alerts: []string{"bucket 530 stuck in Moved for 1m5.2s"}},
		Elapsed:    83 * time.Second,
		BucketRate: 21.25,
		ByteRate:   2_500_000,
	}
}

func TestRenderTTY(t *testing.T) {
	v := sampleView()
	wide := renderTTY(v, 200)
	if want := "\r▕█████████████████░░░▏   87.4%  1,750/2,001 buckets  123,456 docs  56.7 MB  21.2 buckets/s 2.5 MB/s  1m23s  1 ALERT  │ 17 Moving failing×2, 901 Moving, 530 Moved STUCK 1m05s, +1 more\x1b[K"; wide != want {
		t.Errorf("wide line\n%q\nwant\n%q", wide, want)
	}
	for _, width := range []int{200, 120, 100, 80, 60, 40, 20, 5} {
		s := renderTTY(v, width)
		if !strings.HasPrefix(s, "\r") || !strings.HasSuffix(s, "\x1b[K") || strings.Contains(s, "\n") {
			t.Errorf("width %d: not a redrawable line: %q", width, s)
		}
		line := strings.TrimSuffix(strings.TrimPrefix(s, "\r"), "\x1b[K")
		if n := utf8.RuneCountInString(line); n > max(width-1, 10) {
			t.Errorf("width %d: %d columns: %q", width, n, line)
		}
		if width >= 40 && (!strings.Contains(line, "87.4%") || !strings.Contains(line, "1,750/2,001")) {
			t.Errorf("width %d: lost the percentage or counts: %q", width, line)
		}
		if width >= 80 && !strings.Contains(line, "2.5 MB/s") {
			t.Errorf("width %d: lost the rates: %q", width, line)
		}
		if width >= 40 && (!strings.Contains(line, "1m23s") || !strings.Contains(line, "1 ALERT")) {
			t.Errorf("width %d: lost the elapsed time or the alerts: %q", width, line)
		}
	}
	v.Note = "retrying: connection refused"
	v.Op.CurrentBuckets = nil
	if s := renderTTY(v, 200); !strings.Contains(s, "│ retrying: connection refused") {
		t.Errorf("note missing: %q", s)
	}
}

func TestRenderPlain(t *testing.T) {
	v := sampleView()
	got := renderPlain(v)
	want := "Running 87.4%, 1,750/2,001 buckets, 123,456 docs, 56.7 MB, 21.2 buckets/s 2.5 MB/s, 1m23s, 1 ALERT; now: 17 Moving failing×2, 901 Moving, 530 Moved STUCK 1m05s, 900 OwnershipTransferred\n"
	if got != want {
		t.Errorf("plain\n%q\nwant\n%q", got, want)
	}
	if strings.Contains(got, "\r") || strings.Contains(got, "\x1b") {
		t.Errorf("plain line has terminal controls: %q", got)
	}
	// The clock and rates are no change; counts, trouble and notes are.
	counts, news := plainKey(v)
	v2 := v
	v2.Elapsed, v2.BucketRate = time.Hour, 1
	if c, n := plainKey(v2); c != counts || n != news {
		t.Error("the clock changes the plain key")
	}
	v2.Op.BucketsDone++
	if c, n := plainKey(v2); c == counts || n != news {
		t.Error("a bucket done does not change the plain key's counts alone")
	}
	v3 := v
	v3.Op.CurrentBuckets = append([]bucketMigration{{Bucket: 1, Status: "Moving", Failures: 1}}, v.Op.CurrentBuckets...)
	if _, n := plainKey(v3); n == news {
		t.Error("a failing bucket is no news")
	}
	v.Op.BucketsTotal, v.Op.BucketsDone, v.Op.Status = 0, 0, "Completed"
	if got := renderPlain(v); !strings.HasPrefix(got, "Completed 100.0%, 0/0 buckets") {
		t.Errorf("empty operation: %q", got)
	}
	v.BucketRate, v.ByteRate = -1, -1
	if got := renderPlain(v); !strings.Contains(got, "- buckets/s - MB/s") {
		t.Errorf("unknown rate: %q", got)
	}
}

func TestRenderSummary(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	op := operation{OperationID: "x", FromBucket: 0, ToBucket: 999, ToShard: 3, Status: "Completed", BucketsTotal: 1000, BucketsDone: 1000,
		DocumentsMoved: 10_000, BytesMoved: 250_000_000, StartedAt: start, EndedAt: start.Add(20 * time.Second)}
	want := `Completed: buckets 0-999 to shard 3 (operation x)
  Buckets     1,000 of 1,000 moved
  Documents   10,000
  Bytes       250 MB
  Duration    20.0s
  Average     20.00 ms per bucket (50.0 buckets/s)
  Throughput  12.5 MB/s
`
	if got := renderSummary(op, time.Minute, 0); got != want {
		t.Errorf("summary\n%s\nwant\n%s", got, want)
	}
	op.BucketsDone, op.BucketsTotal, op.BytesMoved, op.EndedAt = 0, 0, 0, time.Time{}
	if got := renderSummary(op, 1500*time.Millisecond, 0); !strings.Contains(got, "Duration    1.5s") || !strings.Contains(got, "no bucket needed moving") {
		t.Errorf("empty summary:\n%s", got)
	}
	// A server that reports BucketsMigrated: the average is over the
	// buckets that carried data (the empty ones flip at once).
	sparse := operation{OperationID: "y", FromBucket: 0, ToBucket: 349524, ToShard: 1, Status: "Completed", BucketsTotal: 349525, BucketsDone: 349525,
		BucketsMigrated: 15, DocumentsMoved: 15, BytesMoved: 2700, StartedAt: start, EndedAt: start.Add(75 * time.Millisecond)}
	got := renderSummary(sparse, time.Minute, 0)
	for _, want := range []string{
		"  Buckets     349,525 of 349,525 moved: 15 with data, one at a time; 349,510 empty, at once\n",
		"  Average     5.00 ms per bucket with data (200 data buckets/s)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("sparse summary lacks %q:\n%s", want, got)
		}
	}
	sparse.BucketsMigrated, sparse.DocumentsMoved, sparse.BytesMoved = 0, 0, 0
	if got := renderSummary(sparse, time.Minute, 0); !strings.Contains(got, "0 with data, one at a time; 349,525 empty, at once") || !strings.Contains(got, "every bucket was empty") {
		t.Errorf("all-empty summary:\n%s", got)
	}
}

func TestHumanFormats(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 1000: "1.0 kB", 1536: "1.5 kB", 123_456_789: "123 MB", 5_000_000_000: "5.0 GB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4200: "-4,200"} {
		if got := humanCount(n); got != want {
			t.Errorf("humanCount(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{-time.Second: "0ms", 850 * time.Millisecond: "850ms", 12300 * time.Millisecond: "12.3s",
		245 * time.Second: "4m05s", 2*time.Hour + 3*time.Minute + 10*time.Second: "2h03m10s"} {
		if got := formatElapsed(d); got != want {
			t.Errorf("formatElapsed(%v) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0 docs", 1: "1 doc", 2: "2 docs", 1234: "1,234 docs"} {
		if got := docCount(n); got != want {
			t.Errorf("docCount(%d) = %q, want %q", n, got, want)
		}
	}
	if p := percent(operation{BucketsTotal: 2001, BucketsDone: 2000}); p != 99.9 {
		t.Errorf("percent of 2000/2001 = %v, want 99.9 (never 100 before the end)", p)
	}
}

func TestAlertKey(t *testing.T) {
	if alertKey("bucket 2 stuck in Moving for 1m5s") != alertKey("bucket 2 stuck in Moving for 1m7.25s") {
		t.Error("a stuck alert is new when its time grows")
	}
	if alertKey("bucket 2 stuck in Moving for 1m5s") == alertKey("bucket 2 stuck in Moved for 1m5s") {
		t.Error("a bucket stuck in a new step is not a new alert")
	}
	if alertKey("bucket 2 stuck in Moving for 1m5s") == alertKey("bucket 3 stuck in Moving for 1m5s") {
		t.Error("two buckets share an alert")
	}
	a := "358 buckets stuck in OwnershipTransferred for 1m2s to 7m40.5s, waiting for node B to clean up (buckets 12, 13, 14, 15, 16 and 353 more)"
	b := "357 buckets stuck in OwnershipTransferred for 1m3s to 7m41s, waiting for node B to clean up (buckets 13, 14, 15, 16, 17 and 352 more)"
	if alertKey(a) != alertKey(b) {
		t.Error("an alert several buckets share is new when one of them leaves it")
	}
	if alertKey(a) == alertKey("358 buckets stuck in OwnershipTransferred for 1m2s to 7m40.5s, waiting for node C to clean up (buckets 12, 13)") {
		t.Error("buckets waiting for another node share an alert")
	}
	if alertKey(a) == alertKey("bucket 12 stuck in OwnershipTransferred for 1m2s, waiting for node B to clean up") {
		t.Error("a bucket stuck alone shares the alert of many")
	}
}

func TestReadSSE(t *testing.T) {
	in := ": keepalive\n\nevent: operation\r\nid: 7\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata: plain\n\nevent: cut\ndata: x"
	var got []sseEvent
	if err := readSSE(strings.NewReader(in), func(ev sseEvent) bool { got = append(got, ev); return true }); err != nil {
		t.Fatal(err)
	}
	want := []sseEvent{{Event: "operation", ID: "7", Data: "{\"a\":\n1}"}, {Event: "message", Data: "plain"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %q, want %q (an event cut by the end of the stream is dropped)", got, want)
	}
}

// TestTrackerTerminal checks the terminal output: redraws in place, alerts
// on lines of their own above the progress line, a newline at the end.
func TestTrackerTerminal(t *testing.T) {
	var out bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr := newTracker(&out, true, func() int { return 120 }, func() time.Time { return now })
	tr.color = false
	tr.since = now
	op := operation{OperationID: "x", Status: "Running", BucketsTotal: 10}
	tr.setOp(op)
	now = now.Add(2 * time.Second)
	op.BucketsDone, op.BucketsMigrated, op.DocumentsMoved, op.BytesMoved, op.Alerts = 4, 4, 40, 2_000_000, []string{"bucket 3 (Moving) failing: boom"}
	tr.setOp(op)
	now = now.Add(2 * time.Second)
	tr.tick()
	// Five empty buckets change owner at once: the rate is of the buckets
	// that moved with data.
	op.Status, op.BucketsDone, op.BucketsMigrated, op.DocumentsMoved, op.BytesMoved = "Completed", 10, 5, 50, 2_500_000
	tr.setOp(op)
	tr.end()
	got := out.String()
	if !strings.HasPrefix(got, "\r▕░░░░░░░░░░░░░░░░░░░░▏    0.0%  0/10 buckets") {
		t.Errorf("first draw: %q", got)
	}
	if !strings.Contains(got, "\r\x1b[KALERT bucket 3 (Moving) failing: boom\n\r▕████████") {
		t.Errorf("alert is not on its own line above the redrawn progress: %q", got)
	}
	if !strings.Contains(got, "  2.00 data buckets/s 1.0 MB/s") {
		t.Errorf("rate over the last seconds missing: %q", got)
	}
	if !strings.HasSuffix(got, "100.0%  10/10 buckets  50 docs  2.5 MB  1.25 data buckets/s 625 kB/s  4.0s  1 ALERT\x1b[K\n") {
		t.Errorf("end: %q", got)
	}
}

// TestPlainLinesOfCountsAreSpaced: without a terminal, buckets completing
// many a second make a line a second, with the latest counts; news (a
// bucket failing, the end) makes one at once.
func TestPlainLinesOfCountsAreSpaced(t *testing.T) {
	var out bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr := newTracker(&out, false, nil, func() time.Time { return now })
	tr.plainEvery = time.Second
	op := operation{OperationID: "x", Status: "Running", BucketsTotal: 100}
	tr.setOp(op)
	for i := range 50 { // 50 buckets in half a second: no line
		now = now.Add(10 * time.Millisecond)
		op.BucketsDone, op.BucketsMigrated = int64(i+1), int64(i+1)
		tr.setOp(op)
	}
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Fatalf("%d lines after 50 buckets in 0.5 s, want the first only:\n%s", n, out.String())
	}
	now = now.Add(600 * time.Millisecond)
	tr.tick() // the counts wait for the next tick past the second
	if got := out.String(); strings.Count(got, "\n") != 2 || !strings.Contains(got, " 50/100 buckets") {
		t.Fatalf("after a second, want a line with the latest counts:\n%s", got)
	}
	tr.tick()
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Fatalf("a tick with nothing new printed a line:\n%s", out.String())
	}
	tr.migration(migrationEvent{Bucket: 60, Step: "Error", Error: "boom", OperationID: "x"})
	if n := strings.Count(out.String(), "\n"); n != 3 {
		t.Fatalf("a failing bucket waited for the second:\n%s", out.String())
	}
	now = now.Add(10 * time.Millisecond)
	op.BucketsDone = 51
	tr.setOp(op)
	tr.end()
	if got := out.String(); strings.Count(got, "\n") != 4 || !strings.Contains(got, " 51/100 buckets") {
		t.Fatalf("the end left counts unprinted:\n%s", got)
	}
}

// TestTrackerIgnoresStaleStates checks that a slow poll answering with an
// older state does not move the progress back.
func TestTrackerIgnoresStaleStates(t *testing.T) {
	var out bytes.Buffer
	tr := newTracker(&out, false, nil, time.Now)
	tr.setOp(operation{OperationID: "x", Status: "Running", BucketsTotal: 10, BucketsDone: 5})
	tr.setOp(operation{OperationID: "x", Status: "Running", BucketsTotal: 10, BucketsDone: 3})
	if tr.op.BucketsDone != 5 {
		t.Errorf("progress went back to %d", tr.op.BucketsDone)
	}
	tr.migration(migrationEvent{Bucket: 8, Step: "Moving", OperationID: "x"})
	tr.migration(migrationEvent{Bucket: 8, Step: "Error", Error: "boom", OperationID: "x"})
	if len(tr.op.CurrentBuckets) != 1 || tr.op.CurrentBuckets[0].Failures != 1 || tr.op.CurrentBuckets[0].LastError != "boom" {
		t.Errorf("current buckets %+v", tr.op.CurrentBuckets)
	}
	tr.migration(migrationEvent{Bucket: 8, Step: "Completed", OperationID: "x"})
	if len(tr.op.CurrentBuckets) != 0 {
		t.Errorf("a completed bucket is still current: %+v", tr.op.CurrentBuckets)
	}
	if n := strings.Count(out.String(), "\n"); n != 3 {
		t.Errorf("%d plain lines, want 3 (the first state, the bucket failing, then gone):\n%s", n, out.String())
	}
}

// cancelScript is an operation of buckets 0-9 to shard 1 cancelled while
// bucket 5, which holds one document, is in Moved: three empty buckets
// changed owner before. The bucket in flight finishes its move after the
// cancel (the flip counts it, its last pass adds bytes), as the server
// tells it. It returns the events and the operation's final state.
func cancelScript(t *testing.T) ([]sseEvent, operation, operation) {
	start := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	running := operation{OperationID: fakeOpID, FromBucket: 0, ToBucket: 9, ToShard: 1, Status: "Running", BucketsTotal: 10, BucketsDone: 3,
		StartedAt: start, CurrentBuckets: []bucketMigration{{Bucket: 5, SourceShard: 0, DestinationShard: 1, Status: "Moving"}}}
	cancelled := running
	cancelled.Status, cancelled.EndedAt = "Cancelled", start.Add(2*time.Second)
	cancelled.CurrentBuckets = []bucketMigration{{Bucket: 5, SourceShard: 0, DestinationShard: 1, Status: "Moved"}}
	flipped := cancelled
	flipped.BucketsDone, flipped.BucketsMigrated, flipped.DocumentsMoved, flipped.BytesMoved = 4, 1, 1, 120
	flipped.CurrentBuckets = []bucketMigration{{Bucket: 5, SourceShard: 0, DestinationShard: 1, Status: "OwnershipTransferred"}}
	final := flipped
	final.BytesMoved, final.CurrentBuckets = 150, []bucketMigration{}
	step := func(s string) sseEvent {
		return event(t, "migration", migrationEvent{Bucket: 5, SourceShard: 0, DestinationShard: 1, Step: s, OperationID: fakeOpID, MigrationIndex: 40})
	}
	return []sseEvent{
		event(t, "operation", running),
		step("Moved"),
		event(t, "operation", cancelled),
		step("OwnershipTransferred"),
		event(t, "operation", flipped),
		step("FinalPass"),
		step("Completed"),
	}, running, final
}

// TestMoveCancelledWaitsForBucketInFlight: a cancelled operation's bucket
// in flight finishes its move and counts, so following it goes on until
// no bucket of it is in flight, saying so, and the summary has the final
// figures; its rates agree with the last progress line's.
func TestMoveCancelledWaitsForBucketInFlight(t *testing.T) {
	events, running, final := cancelScript(t)
	inFlight := final
	inFlight.BytesMoved, inFlight.CurrentBuckets = 120, []bucketMigration{{Bucket: 5, SourceShard: 0, DestinationShard: 1, Status: "OwnershipTransferred"}}
	for _, tc := range []struct {
		name  string
		setup func(f *fakeAPI)
	}{
		// The stream tells the steps; a last read of the operation gives
		// what the final pass added.
		{"stream", func(f *fakeAPI) { f.events, f.polls = events, []operation{running, final} }},
		// Polling alone sees the cancel before the bucket is done.
		{"polling", func(f *fakeAPI) {
			cancelled := running
			cancelled.Status, cancelled.EndedAt = "Cancelled", final.EndedAt
			f.noStream, f.polls = true, []operation{running, cancelled, inFlight, inFlight, final}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, srv := newFakeAPI(t)
			f.configure(tc.setup)
			c, err := newAPIClient(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			opts := defaultFollowOptions
			opts.pollEvery, opts.refreshEvery = 5*time.Millisecond, time.Hour
			opts.plainEvery = 0 // the script's states come milliseconds apart; print each
			if tc.name == "polling" {
				opts.refreshEvery = 5 * time.Millisecond
			}
			var out bytes.Buffer
			mf := moveFlags{nodeFlags: nodeFlags{db: "shop"}, from: 0, to: 9, shard: 1}
			err = runMove(t.Context(), c, mf, &out, opts)
			got := out.String()
			if err == nil || err.Error() != "operation "+fakeOpID+" ended Cancelled" {
				t.Errorf("error %v, want the operation ended Cancelled\n%s", err, got)
			}
			for _, want := range []string{
				"; now: 5 OwnershipTransferred; cancelled; waiting for the bucket in flight to finish\n",
				"Cancelled: buckets 0-9 to shard 1 (operation " + fakeOpID + ")\n",
				"  Buckets     4 of 10 moved: 1 with data, one at a time; 3 empty, at once\n",
				"  Documents   1\n",
				"  Bytes       150 B\n",
				" after the cancel, finishing the move in flight)\n",
			} {
				if !strings.Contains(got, want) {
					t.Errorf("output lacks %q:\n%s", want, got)
				}
			}
			// The last progress line: settled, and with the summary's rates.
			lines := strings.Split(got, "\n")
			var last string
			for _, l := range lines {
				if strings.HasPrefix(l, "Cancelled ") {
					last = l
				}
			}
			if !strings.HasPrefix(last, "Cancelled 40.0%, 4/10 buckets, 1 doc, 150 B, ") || strings.Contains(last, "waiting") || strings.Contains(last, "now:") {
				t.Errorf("last progress line %q", last)
			}
			m := regexp.MustCompile(`Average +[0-9.]+ ?m?s per bucket with data \(([0-9.]+ data buckets/s)\)\n  Throughput  (.*)\n`).FindStringSubmatch(got)
			if m == nil {
				t.Fatalf("summary has no average and throughput:\n%s", got)
			}
			if want := m[1] + " " + m[2] + ", "; !strings.Contains(last, want) {
				t.Errorf("last progress line %q, want the summary's rates %q", last, want)
			}
		})
	}
}

// TestProgressRateIsOfBucketsWithData: empty buckets changing owner by the
// hundred thousand do not make a rate; the buckets that moved with data do.
func TestProgressRateIsOfBucketsWithData(t *testing.T) {
	var out bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr := newTracker(&out, false, nil, func() time.Time { return now })
	tr.since = now
	op := operation{OperationID: "x", Status: "Running", BucketsTotal: 200_000}
	tr.setOp(op)
	now = now.Add(time.Second)
	op.BucketsDone = 161_150
	tr.setOp(op)
	now = now.Add(time.Second)
	op.BucketsDone, op.BucketsMigrated, op.DocumentsMoved, op.BytesMoved = 161_152, 2, 30, 4_000_000
	tr.setOp(op)
	got := out.String()
	if strings.Contains(got, "161150") || strings.Contains(got, "80576") {
		t.Errorf("the rate counts empty buckets:\n%s", got)
	}
	for _, want := range []string{", 161,150/200,000 buckets, 0 docs, 0 B, 0 data buckets/s 0 B/s, 1.0s\n",
		", 161,152/200,000 buckets, 30 docs, 4.0 MB, 1.00 data buckets/s 2.0 MB/s, 2.0s\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// TestFollowInterruptedWhileBucketInFlight: Ctrl-C after the cancel, while
// the bucket in flight still moves, says that it does.
func TestFollowInterruptedWhileBucketInFlight(t *testing.T) {
	f, srv := newFakeAPI(t)
	events, _, _ := cancelScript(t)
	events = events[:3] // cancelled, bucket 5 still in Moved
	var cancelled operation
	if err := json.Unmarshal([]byte(events[2].Data), &cancelled); err != nil || cancelled.Status != "Cancelled" {
		t.Fatalf("%v %+v", err, cancelled)
	}
	f.configure(func(f *fakeAPI) { f.events, f.polls = events, []operation{cancelled} })
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for {
			if reqs, _ := f.seen(); len(reqs) >= 2 {
				time.Sleep(50 * time.Millisecond)
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	out, err := run(ctx, "buckets", "status", "--url", srv.URL, "--db", "shop", "--id", fakeOpID, "--follow")
	if !errors.Is(err, errInterrupted) {
		t.Fatalf("error %v, want errInterrupted\n%s", err, out)
	}
	for _, want := range []string{"; now: 5 Moved; cancelled; waiting for the bucket in flight to finish\n",
		"Stopped following. Operation " + fakeOpID + " is cancelled; its bucket in flight keeps moving on the server.\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Cancelled: buckets") {
		t.Errorf("a summary before the bucket in flight finished:\n%s", out)
	}
}

// TestRenderBucketWhileMoving: the bucket's figures are the owner's; a
// copy on a shard that does not own the bucket is shown apart.
func TestRenderBucketWhileMoving(t *testing.T) {
	info := bucketInfo{Bucket: 58091, Shards: []int{0, 1}, DocumentsCount: 1, Size: 74, ChangeVector: "A:1-x", Documents: []string{"users/2"},
		ByShard: []shardHolding{{Shard: 0, DocumentsCount: 1, Size: 74}, {Shard: 1, DocumentsCount: 1, Size: 132, NotOwnedDocumentsCount: 1, NotOwnedSize: 132}}}
	got := renderBucket("shop", info, 20)
	for _, want := range []string{"  Shards         0,1\n", "  Documents      1\n", "  Size           74 B\n",
		"  Not counted    shard 1 also holds 1 document (132 B) without owning the bucket: a move in flight, or leftovers\n", "    users/2\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("bucket lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "and 1 more") || strings.Count(got, "Not counted") != 1 {
		t.Errorf("bucket:\n%s", got)
	}
}

// TestStatusTextShowsWhatWasSent: a bucket long in Moving whose server
// reports what its sender sent shows it, in the status table and the
// progress line; one without keeps its bare status.
func TestStatusTextShowsWhatWasSent(t *testing.T) {
	m := bucketMigration{Bucket: 5, Status: "Moving", InStatusFor: "1m30s", Sent: &sentProgress{Node: "A", Documents: 300, Bytes: 150_000_000, LastStoredAgo: "80ms"}}
	if got, want := m.statusText(), "Moving (150 MB sent)"; got != want {
		t.Errorf("statusText = %q, want %q", got, want)
	}
	if got, want := currentText([]bucketMigration{m, {Bucket: 9, Status: "Moved"}}, nil, 5), "5 Moving (150 MB sent), 9 Moved"; got != want {
		t.Errorf("currentText = %q, want %q", got, want)
	}
}

// TestProgressCountsBytesWhenEstimated: with an estimate of the bytes to
// move, the share done, the size and the ETA count bytes, those sent of a
// bucket still Moving included, so a move of a few large buckets among
// many empty ones does not read 99% at once, nor 0% for the whole copy of
// one large bucket; it reaches 100% only when settled. Without an
// estimate the share counts buckets, as before.
func TestProgressCountsBytesWhenEstimated(t *testing.T) {
	op := operation{Status: statusRunning, BucketsTotal: 50001, BucketsDone: 49758, BytesMoved: 10 << 20,
		CurrentBuckets: []bucketMigration{{Bucket: 7, Status: "Moving", Sent: &sentProgress{Bytes: 30 << 20}}, {Bucket: 8, Status: "Moved"}}}
	v := progressView{Op: op, Total: 100 << 20, ByteRate: 4 << 20, BucketRate: 1}
	if got := v.share(); got != 40 {
		t.Errorf("share %v, want 40 (10 MiB done and 30 MiB sent of 100)", got)
	}
	if got, want := v.eta(), "ETA 15s"; got != want {
		t.Errorf("eta %q, want %q", got, want)
	}
	if got := v.sizeText(); got != humanBytes(40<<20)+" of ~"+humanBytes(100<<20) {
		t.Errorf("size %q", got)
	}
	line := renderPlain(v)
	for _, want := range []string{"40.0%", "ETA 15s", "of ~"} {
		if !strings.Contains(line, want) {
			t.Errorf("plain line %q lacks %q", line, want)
		}
	}
	if tty := renderTTY(v, 200); !strings.Contains(tty, " 40.0%") || !strings.Contains(tty, "ETA") {
		t.Errorf("terminal line %q", tty)
	}
	over := v
	over.Op.BytesMoved = 200 << 20
	if got := over.share(); got != 99.9 {
		t.Errorf("past the estimate while running: %v, want 99.9", got)
	}
	done := v
	done.Op.Status, done.Op.CurrentBuckets = statusCompleted, nil
	if got := done.share(); got != 100 || done.eta() != "" {
		t.Errorf("settled: share %v eta %q, want 100 and none", got, done.eta())
	}
	plain := v
	plain.Total = 0
	if got := plain.share(); got != 99.5 || plain.eta() != "" || plain.sizeText() != humanBytes(10<<20) {
		t.Errorf("without an estimate: share %v eta %q size %q, want the buckets' 99.5, no ETA, the bytes of the buckets done", got, plain.eta(), plain.sizeText())
	}
}

// TestProgressWhileHeld: while the operation is held for source cleanups
// its progress line says so and gives no ETA (the rate measures the hold,
// not the move), and the share says it counts data, not buckets.
func TestProgressWhileHeld(t *testing.T) {
	op := operation{Status: statusRunning, BucketsTotal: 524288, BucketsDone: 510383, BytesMoved: 1 << 20}
	v := progressView{Op: op, Total: 300 << 20, ByteRate: 10, BucketRate: 0.01}
	if v.eta() == "" {
		t.Fatalf("no ETA before the hold")
	}
	v.Op.CleanupHold = &cleanupHold{Waiting: 50, Limit: 50}
	if got := v.eta(); got != "" {
		t.Errorf("ETA %q while held", got)
	}
	line := renderPlain(v)
	for _, want := range []string{"0.3% of data", "510,383/524,288 buckets", "HELD: 50 moved buckets await source cleanup"} {
		if !strings.Contains(line, want) {
			t.Errorf("plain line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "ETA") {
		t.Errorf("plain line %q has an ETA while held", line)
	}
	if tty := renderTTY(v, 200); !strings.Contains(tty, "HELD") || strings.Contains(tty, "ETA") || !strings.Contains(tty, "of data") {
		t.Errorf("terminal line %q", tty)
	}
}

// TestByteRateCountsWhatIsInFlight: the byte rate includes what the
// sender of a bucket in Moving has had stored, so a long copy shows its
// rate while it runs instead of 0 until the bucket changes owner.
func TestByteRateCountsWhatIsInFlight(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := newTracker(io.Discard, false, nil, func() time.Time { return now })
	tr.since = now
	op := operation{OperationID: "x", Status: statusRunning, BucketsTotal: 1, StartedAt: now,
		CurrentBuckets: []bucketMigration{{Bucket: 7, Status: "Moving", Sent: &sentProgress{Bytes: 0}}}}
	tr.setOp(op)
	tr.sample()
	now = now.Add(2 * time.Second)
	op.CurrentBuckets = []bucketMigration{{Bucket: 7, Status: "Moving", Sent: &sentProgress{Bytes: 8 << 20}}}
	tr.setOp(op)
	tr.sample()
	if _, bytes := tr.rates(now, 2*time.Second); bytes != 4<<20 {
		t.Fatalf("byte rate %v during the copy, want %d", bytes, 4<<20)
	}
}

// TestEstimateTotal: the estimate is what the operation moved plus the
// range's owned bytes on the shards other than its destination, from the
// operation's state and the buckets report; 0 for a finished operation or
// a report the node does not give.
func TestEstimateTotal(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/databases/shop/buckets":
			if q := r.URL.Query(); q.Get("from") != "10" || q.Get("to") != "20" || q.Get("groups") != "1" {
				http.Error(w, "bad query "+r.URL.RawQuery, 400)
				return
			}
			fmt.Fprint(w, `{"Groups":[{"ByShard":[{"Shard":0,"Size":7000,"NotOwnedSize":2000},{"Shard":1,"Size":900,"NotOwnedSize":500},{"Shard":2,"Size":3000}]}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := newAPIClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	op := operation{OperationID: fakeOpID, FromBucket: 10, ToBucket: 20, ToShard: 1, Status: statusRunning, BytesMoved: 1000,
		CurrentBuckets: []bucketMigration{{Bucket: 12, Status: "Moving", Sent: &sentProgress{Bytes: 500}}}}
	if got, want := estimateTotal(t.Context(), c, "shop", op), int64(1000+500+5000+3000); got != want {
		t.Errorf("estimate %d, want %d", got, want)
	}
	if got := estimateTotal(t.Context(), c, "other", op); got != 0 {
		t.Errorf("estimate for a database the node does not know %d, want 0", got)
	}
	op.Status = statusCompleted
	if got := estimateTotal(t.Context(), c, "shop", op); got != 0 {
		t.Errorf("estimate of a finished operation %d, want 0", got)
	}
}

// TestCurrentTextCountsTheUnlistedBySteps: the buckets past the limit are
// counted by step, stuck ones apart, most first.
func TestCurrentTextCountsTheUnlistedBySteps(t *testing.T) {
	var cbs []bucketMigration
	for i := range 12 {
		cbs = append(cbs, bucketMigration{Bucket: uint32(100 + i), Status: "OwnershipTransferred", Stuck: true, InStatusFor: "2m"})
	}
	cbs = append(cbs, bucketMigration{Bucket: 5, Status: "Moving"}, bucketMigration{Bucket: 300, Status: "Moved"}, bucketMigration{Bucket: 301, Status: "Moved"})
	got := currentText(cbs, nil, 1)
	want := "5 Moving, +14 more (12 OwnershipTransferred STUCK, 2 Moved)"
	if got != want {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
	// The buckets the server did not list count too.
	if got := currentText(cbs, map[string]int{"OwnershipTransferred": 5}, 3); !strings.HasSuffix(got, ", +17 more (12 OwnershipTransferred STUCK, 5 OwnershipTransferred)") {
		t.Errorf("with 5 more unlisted: %q", got)
	}
	if got := currentText(cbs[:4], nil, 3); !strings.HasSuffix(got, ", +1 more") {
		t.Errorf("one bucket past the limit: %q", got)
	}
}

// TestCurrentTextListsTheMovingBucketFirst: with a source node down, the
// flipped buckets waiting for its cleanup may all be numbered below the
// one bucket in transfer; that bucket is still listed, and first.
func TestCurrentTextListsTheMovingBucketFirst(t *testing.T) {
	var cbs []bucketMigration
	for i := range 20 {
		cbs = append(cbs, bucketMigration{Bucket: uint32(i), Status: "OwnershipTransferred", Stuck: true, InStatusFor: "3m"})
	}
	cbs = append(cbs, bucketMigration{Bucket: 900, Status: "Moved"}, bucketMigration{Bucket: 700, Status: "Moving"})
	got := currentText(cbs, map[string]int{"OwnershipTransferred": 4}, 3)
	want := "700 Moving, 900 Moved, 0 OwnershipTransferred STUCK 3m00s, +23 more (19 OwnershipTransferred STUCK, 4 OwnershipTransferred)"
	if got != want {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}
