package systemtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// startReshard asks to move [from, to] to shard and returns the operation id.
func startReshard(t testing.TB, url, db string, from, to uint32, shard int) string {
	t.Helper()
	r := testcluster.Must(t, 202, "POST", url+"/databases/"+db+"/resharding", fmt.Sprintf(`{"FromBucket":%d,"ToBucket":%d,"ToShard":%d}`, from, to, shard)).JSON(t)
	return r["OperationId"].(string)
}

// waitOperation waits until the operation completed and no migration is
// left in the record (cleanup done).
func waitOperation(t testing.TB, url, db, id string, timeout time.Duration) map[string]any {
	t.Helper()
	var op map[string]any
	testcluster.WaitFor(t, timeout, "resharding operation "+id, func() error {
		op = testcluster.Must(t, 200, "GET", url+"/databases/"+db+"/resharding/"+id, "").JSON(t)
		if op["Status"] != "Completed" {
			return fmt.Errorf("operation %s: %v done of %v, current %v, errors %v", op["Status"], op["BucketsDone"], op["BucketsTotal"], mustJSON(op["CurrentBuckets"]), op["Errors"])
		}
		return nil
	})
	testcluster.WaitFor(t, timeout, "migrations to clean up", func() error {
		rec := testcluster.Must(t, 200, "GET", url+"/admin/databases/"+db, "").JSON(t)
		if m := rec["Sharding"].(map[string]any)["BucketMigrations"].(map[string]any); len(m) != 0 {
			return fmt.Errorf("migrations left: %s", mustJSON(m))
		}
		return nil
	})
	return op
}

func bucketOf(t testing.TB, url, db, id string) (uint32, int) {
	r := testcluster.Must(t, 200, "GET", url+"/databases/"+db+"/sharding/bucket?id="+id, "").JSON(t)
	return uint32(r["Bucket"].(float64)), int(r["Shard"].(float64))
}

func TestMoveOneBucket(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	var cmds []string
	for i := 0; i < 50; i++ {
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"orders/%d$users/1","Document":{"N":%d,"@metadata":{"@collection":"Orders"}}}`, i, i))
	}
	cmds = append(cmds, `{"Type":"DELETE","Id":"orders/0$users/1"}`)
	testcluster.Must(t, 201, "POST", A+"/databases/db/bulk_docs?waitForReplicas=2", `{"Commands":[`+join(cmds)+`]}`)
	b, src := bucketOf(t, A, "db", "users/1")
	dst := (src + 1) % 3
	before := testcluster.Must(t, 200, "GET", A+"/databases/db/docs?id=orders/7$users/1", "").JSON(t)
	cvBefore := before["Results"].([]any)[0].(map[string]any)["@metadata"].(map[string]any)["@change-vector"].(string)

	id := startReshard(t, c.URL(1), "db", b, b, dst)
	op := waitOperation(t, A, "db", id, 30*time.Second)
	if op["BucketsDone"] != float64(1) || op["BucketsTotal"] != float64(1) || op["DocumentsMoved"].(float64) < 50 {
		t.Fatalf("operation %v", op)
	}
	// Readable through every node, from the destination.
	for i := range c.Members {
		for n := 1; n < 50; n++ {
			r := testcluster.Must(t, 200, "GET", fmt.Sprintf("%s/databases/db/docs?id=orders/%d$users/1", c.URL(i), n), "").JSON(t)
			md := r["Results"].([]any)[0].(map[string]any)["@metadata"].(map[string]any)
			if int(md["@shard"].(float64)) != dst {
				t.Fatalf("served by shard %v, want %d", md["@shard"], dst)
			}
		}
	}
	// Only on the destination: ask every replica of both shards directly.
	members := shardMembers(t, A, "db")
	for _, shard := range []int{src, dst} {
		for _, tag := range members[shard] {
			m := memberByTag(c, tag)
			testcluster.WaitFor(t, 10*time.Second, fmt.Sprintf("shard %d on %s to settle", shard, tag), func() error {
				bk := testcluster.Must(t, 200, "GET", fmt.Sprintf("%s/databases/db$%d/buckets/%d", m.URL(), shard, b), "").JSON(t)
				want := 0.0
				if shard == dst {
					want = 49
				}
				if bk["DocumentsCount"] != want {
					return fmt.Errorf("shard %d on %s holds %v documents of bucket %d, want %v", shard, tag, bk["DocumentsCount"], b, want)
				}
				r, _ := testcluster.Do("GET", fmt.Sprintf("%s/databases/db$%d/docs?id=orders/5$users/1", m.URL(), shard), "")
				if (shard == dst) != (r.Status == 200) {
					return fmt.Errorf("shard %d on %s answers %d for a moved document", shard, tag, r.Status)
				}
				return nil
			})
		}
	}
	// The buckets report shows the bucket on the destination only.
	rep := testcluster.Must(t, 200, "GET", fmt.Sprintf("%s/databases/db/buckets/%d", A, b), "").JSON(t)
	if fmt.Sprint(rep["Shards"]) != fmt.Sprintf("[%d]", dst) || rep["DocumentsCount"] != float64(49) {
		t.Fatalf("bucket report %v", rep)
	}
	// If-Match with the change vector read before the move still works.
	testcluster.Must(t, 201, "PUT", A+"/databases/db/docs?id=orders/7$users/1", `{"N":700,"@metadata":{"@collection":"Orders"}}`, "If-Match", cvBefore)
	testcluster.Must(t, 409, "PUT", A+"/databases/db/docs?id=orders/7$users/1", `{"N":701}`, "If-Match", cvBefore)
	// A query sees every document once.
	q := testcluster.Must(t, 200, "POST", c.URL(2)+"/databases/db/queries", `{"Query":"from Orders"}`).JSON(t)
	if q["TotalResults"] != float64(49) {
		t.Fatalf("query counts %v", q["TotalResults"])
	}
}

func join(parts []string) string { return strings.Join(parts, ",") }
