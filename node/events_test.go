package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardnode/shardnode/bucket"
)

// TestEventsListEveryStepOfAMove follows /events while a bucket with
// documents moves between two shards of one node, and checks that the
// stream carries each of the bucket's steps once, in order, with raft
// indexes as ids, and the operation's completion.
func TestEventsListEveryStepOfAMove(t *testing.T) {
	n := testNode(t, t.TempDir())
	c := client{t, n.HTTPURL()}
	c.must(201, "PUT", "/admin/databases/db", `{"Shards": 2}`)
	var cmds []string
	for i := 0; i < 20; i++ {
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"orders/%d$tenants/7","Document":{"n":%d}}`, i, i))
	}
	c.must(201, "POST", "/databases/db/bulk_docs", `{"Commands":[`+strings.Join(cmds, ",")+`]}`)
	b := bucket.ForID("tenants/7")
	rec := c.must(200, "GET", "/admin/databases/db", "").json(t)
	to := 1
	for _, r := range rec["Sharding"].(map[string]any)["BucketRanges"].([]any) {
		rr := r.(map[string]any)
		if uint32(rr["BucketRangeStart"].(float64)) <= b {
			to = 1 - int(rr["ShardNumber"].(float64))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", n.HTTPURL()+"/databases/db/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	c.must(202, "POST", "/databases/db/resharding", fmt.Sprintf(`{"FromBucket": %d, "ToBucket": %d, "ToShard": %d}`, b, b, to))

	var seen []string
	var lastID uint64
	sc := bufio.NewScanner(res.Body)
	var event string
	var id uint64
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[7:]
		case strings.HasPrefix(line, "id: "):
			fmt.Sscan(line[4:], &id)
		case strings.HasPrefix(line, "data: "):
			if id < lastID {
				t.Fatalf("event id %d after %d", id, lastID)
			}
			lastID = id
			var d map[string]any
			if err := json.Unmarshal([]byte(line[6:]), &d); err != nil {
				t.Fatalf("event data %s: %v", line, err)
			}
			switch event {
			case "migration":
				if uint32(d["Bucket"].(float64)) == b {
					seen = append(seen, d["Step"].(string))
				}
			case "operation":
				if d["Status"] == "Completed" {
					if got := strings.Join(seen, ","); got != "Moving,Moved,OwnershipTransferred,Completed" {
						t.Fatalf("steps of bucket %d: %s", b, got)
					}
					return
				}
			case "resync":
				t.Fatalf("resync on an idle node: %s", line)
			}
		}
	}
	t.Fatalf("stream ended (%v) before the operation completed; steps %v", sc.Err(), seen)
}
