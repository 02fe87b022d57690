package systemtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/shardnode/shardnode/config"
	"github.com/shardnode/shardnode/freeport"
	"github.com/shardnode/shardnode/node"
	"github.com/shardnode/shardnode/testcluster"
)

// TestMembership: nodes joined through A appear everywhere; a command sent
// to a follower is forwarded to the leader; a removed node leaves the raft
// configuration and the node list; a restarted member rejoins with its
// state.
func TestMembership(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	leader := c.Leader()
	follower := (leader + 1) % 3
	other := (leader + 2) % 3
	// Created through a follower: forwarded to the leader.
	testcluster.Must(t, 201, "PUT", c.URL(follower)+"/admin/databases/db", `{"Shards":2,"ReplicationFactor":3}`)
	testcluster.Must(t, 409, "PUT", c.URL(other)+"/admin/databases/db", `{"Shards":2}`)
	testcluster.Must(t, 201, "PUT", c.URL(other)+"/databases/db/docs?id=a&waitForReplicas=3", `{"v":1}`)

	// Restart a member: it comes back with its data and its place.
	c.Members[other].Stop()
	c.Members[other].Start()
	c.WaitMembers(3)
	testcluster.Must(t, 200, "GET", fmt.Sprintf("%s/databases/db$%d/docs?id=a", c.URL(other), shardOf(t, c.URL(0), "db", "a")), "")

	// Remove it through a follower.
	victim := c.Members[other]
	victim.Stop()
	testcluster.Must(t, 204, "DELETE", c.URL(follower)+"/cluster/nodes/"+victim.Tag, "")
	testcluster.Must(t, 404, "DELETE", c.URL(follower)+"/cluster/nodes/"+victim.Tag, "")
	testcluster.WaitFor(t, 10*time.Second, "the node list to shrink", func() error {
		for _, i := range []int{leader, follower} {
			cl := testcluster.Must(t, 200, "GET", c.URL(i)+"/cluster", "").JSON(t)
			if n := len(cl["Nodes"].([]any)); n != 2 {
				return fmt.Errorf("node %d lists %d nodes", i, n)
			}
		}
		return nil
	})
	// Two nodes still form a working cluster (2 of 2 voters).
	testcluster.Must(t, 201, "PUT", c.URL(follower)+"/admin/databases/db2", `{"Shards":1,"ReplicationFactor":2}`)
}

func shardOf(t *testing.T, url, db, id string) int {
	r := testcluster.Must(t, 200, "GET", url+"/databases/"+db+"/sharding/bucket?id="+id, "").JSON(t)
	return int(r["Shard"].(float64))
}

// TestRemovedNodesReplicasMoveElsewhere: a dead node that held replicas —
// one of them a destination of a bucket move that can no longer finish
// without it — is removed. Its shards get another member, which fills by
// replication; the move completes; every replica converges; a node holding
// a shard's only replica cannot be removed.
func TestRemovedNodesReplicasMoveElsewhere(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	leader := c.Leader()
	L := c.URL(leader)
	testcluster.Must(t, 201, "PUT", L+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	var victim *testcluster.Member
	for i, m := range c.Members {
		if i != leader {
			victim = m
			break
		}
	}
	// The move goes to a shard the victim holds, from one it does not.
	members := shardMembers(t, L, "db")
	dest := -1
	for s, ms := range members {
		if slices.Contains(ms, victim.Tag) && (dest < 0 || s < dest) {
			dest = s
		}
	}
	var tenant string
	for i := 0; tenant == ""; i++ {
		id := fmt.Sprintf("tenants/%d", i)
		if _, s := bucketOf(t, L, "db", id); s != dest {
			tenant = id
		}
	}
	var cmds []string
	for i := 0; i < 40; i++ {
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"orders/%d$%s","Document":{"n":%d}}`, i, tenant, i))
		cmds = append(cmds, fmt.Sprintf(`{"Type":"PUT","Id":"users/%d","Document":{"n":%d}}`, i, i))
	}
	testcluster.Must(t, 201, "POST", L+"/databases/db/bulk_docs?waitForReplicas=2", `{"Commands":[`+join(cmds)+`]}`)
	testcluster.Must(t, 201, "PUT", L+"/admin/databases/solo", `{"Shards":3,"ReplicationFactor":1}`)

	victim.Kill()
	testcluster.WaitFor(t, 30*time.Second, "the victim to be seen down", func() error {
		cl := testcluster.Must(t, 200, "GET", L+"/cluster", "").JSON(t)
		for _, n := range cl["Nodes"].([]any) {
			if n := n.(map[string]any); n["Tag"] == victim.Tag && n["Status"] != "Down" {
				return fmt.Errorf("%s is %v", victim.Tag, n["Status"])
			}
		}
		return nil
	})
	b, _ := bucketOf(t, L, "db", tenant)
	op := startReshard(t, L, "db", b, b, dest)

	// It holds the only replica of a shard of "solo": refused, nothing changes.
	r := testcluster.Must(t, 409, "DELETE", L+"/cluster/nodes/"+victim.Tag, "").JSON(t)
	if r["Type"] != "OnlyReplica" {
		t.Fatalf("refusal %v", r)
	}
	testcluster.Must(t, 204, "DELETE", L+"/admin/databases/solo", "")
	testcluster.Must(t, 204, "DELETE", L+"/cluster/nodes/"+victim.Tag, "")

	for s, ms := range shardMembers(t, L, "db") {
		if len(ms) != 2 || slices.Contains(ms, victim.Tag) {
			t.Fatalf("shard %d members %v after removing %s", s, ms, victim.Tag)
		}
	}
	waitOperation(t, L, "db", op, 90*time.Second)
	testcluster.WaitFor(t, 60*time.Second, "replicas to converge", func() error { return converged(t, c, "db") })
	if _, s := bucketOf(t, L, "db", tenant); s != dest {
		t.Fatalf("bucket of %s on shard %d, want %d", tenant, s, dest)
	}
	for i := 0; i < 40; i++ {
		testcluster.Must(t, 200, "GET", fmt.Sprintf("%s/databases/db/docs?id=orders/%d$%s", L, i, tenant), "")
		testcluster.Must(t, 200, "GET", fmt.Sprintf("%s/databases/db/docs?id=users/%d", L, i), "")
	}
}

// TestRemovedLiveNodeStopsServing: a node removed while it runs hears no
// more of the raft log, so it must not go on routing reads and writes by
// its frozen records: it answers 503 NodeRemoved, and its health says so.
func TestRemovedLiveNodeStopsServing(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	leader := c.Leader()
	L := c.URL(leader)
	testcluster.Must(t, 201, "PUT", L+"/admin/databases/db", `{"Shards":2,"ReplicationFactor":2}`)
	testcluster.Must(t, 201, "PUT", L+"/databases/db/docs?id=users/1", `{"v":1}`)
	victim := c.Members[(leader+1)%3]
	testcluster.Must(t, 200, "GET", victim.URL()+"/databases/db/docs?id=users/1", "")
	testcluster.Must(t, 204, "DELETE", L+"/cluster/nodes/"+victim.Tag, "")
	testcluster.WaitFor(t, 10*time.Second, "the removed node to refuse", func() error {
		for _, p := range []struct{ method, path, body string }{
			{"GET", "/databases/db/docs?id=users/1", ""},
			{"PUT", "/databases/db/docs?id=users/2", `{"v":2}`},
		} {
			r, err := testcluster.Do(p.method, victim.URL()+p.path, p.body)
			if err != nil {
				return err
			}
			if r.Status != 503 || !strings.Contains(string(r.Body), "NodeRemoved") {
				return fmt.Errorf("%s %s: %d %s", p.method, p.path, r.Status, r.Body)
			}
		}
		return nil
	})
	if h, _ := testcluster.Do("GET", victim.URL()+"/healthz", ""); h.Status != 503 || !strings.Contains(string(h.Body), `"Removed":true`) {
		t.Fatalf("health of the removed node: %d %s", h.Status, h.Body)
	}
	testcluster.Must(t, 200, "GET", L+"/databases/db/docs?id=users/1", "")

	// Restarted with its data directory, it does not come back: the leader
	// refuses its registration, and without raft.join it learns from the
	// members it knew that they dropped it, instead of waiting for a leader
	// that never speaks to it.
	victim.Stop()
	for _, join := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		err := victim.StartInProcess(ctx, func(cfg *config.Config) {
			if !join {
				cfg.Raft.Join = ""
			}
		})
		cancel()
		if !errors.Is(err, node.ErrRemoved) {
			t.Fatalf("restart of the removed node (raft.join set: %v): %v, want ErrRemoved", join, err)
		}
		t.Logf("raft.join set: %v: refused after %v: %v", join, time.Since(start).Round(time.Millisecond), err)
	}
	if r := testcluster.Must(t, 200, "GET", L+"/cluster", ""); strings.Contains(string(r.Body), `"Tag":"`+victim.Tag+`"`) {
		t.Fatalf("the removed node is back: %s", r.Body)
	}
}

// TestConcurrentCreatesOfOneNameInOtherCases: creates of names that differ
// only in case, sent to three nodes at once, make one database; the others
// are 409s (they made two or three before).
func TestConcurrentCreatesOfOneNameInOtherCases(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	for round := range 5 {
		names := []string{fmt.Sprintf("race%d", round), fmt.Sprintf("RACE%d", round), fmt.Sprintf("Race%d", round)}
		var wg sync.WaitGroup
		codes := make([]int, len(names))
		for i, name := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := testcluster.Do("PUT", c.URL(i)+"/admin/databases/"+name, `{"Shards":1}`)
				if err != nil {
					t.Error(err)
					return
				}
				codes[i] = r.Status
			}()
		}
		wg.Wait()
		created := 0
		for _, code := range codes {
			switch code {
			case 201:
				created++
			case 409:
			default:
				t.Fatalf("round %d: answers %v", round, codes)
			}
		}
		if created != 1 {
			t.Fatalf("round %d: %d databases created of one name in other cases (answers %v)", round, created, codes)
		}
	}
	dbs := testcluster.Must(t, 200, "GET", c.URL(0)+"/admin/databases", "").JSON(t)["Databases"].([]any)
	if len(dbs) != 5 {
		t.Fatalf("%d databases, want 5", len(dbs))
	}
}

// TestRestartWithChangedRaftAddrIsRefused: a member restarted without
// raft.join on another raft.addr is refused at once, naming both
// addresses, instead of waiting 60 s for a leader that dials its old
// address. With raft.join it registers the new address through that URL
// and serves; raft's configuration then holds the new address.
func TestRestartWithChangedRaftAddrIsRefused(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	leader := c.Leader()
	victim := c.Members[(leader+1)%3]
	victim.Stop()
	ports, err := freeport.Take(1)
	if err != nil {
		t.Fatal(err)
	}
	oldAddr := fmt.Sprintf("127.0.0.1:%d", victim.RaftPort)
	newAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err = victim.StartInProcess(ctx, func(cfg *config.Config) {
		cfg.Raft.Addr = newAddr
		cfg.Raft.Join = ""
	})
	took := time.Since(start)
	if !errors.Is(err, node.ErrRaftAddrChanged) {
		t.Fatalf("restart with raft.addr %s (was %s), no raft.join: %v, want ErrRaftAddrChanged", newAddr, oldAddr, err)
	}
	for _, want := range []string{"raft.addr", oldAddr, newAddr, "raft.join"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error does not name %q: %v", want, err)
		}
	}
	if took > 5*time.Second {
		t.Fatalf("refused after %v, want at once", took)
	}
	t.Logf("refused after %v: %v", took.Round(time.Millisecond), err)

	if err := victim.StartInProcess(ctx, func(cfg *config.Config) { cfg.Raft.Addr = newAddr }); err != nil {
		t.Fatalf("restart with raft.addr %s and raft.join: %v", newAddr, err)
	}
	testcluster.WaitFor(t, 10*time.Second, "the cluster to list node "+victim.Tag+" at "+newAddr, func() error {
		r, err := testcluster.Expect(200, "GET", c.URL(leader)+"/cluster", "")
		if err != nil {
			return err
		}
		want := fmt.Sprintf(`"Tag":%q,"HttpUrl":%q,"RaftAddr":%q`, victim.Tag, victim.URL(), newAddr)
		if !strings.Contains(string(r.Body), want) {
			return fmt.Errorf("no %s in %s", want, r.Body)
		}
		return nil
	})
	testcluster.Must(t, 201, "PUT", c.URL(leader)+"/admin/databases/db", `{"Shards":1,"ReplicationFactor":3}`)
	testcluster.Must(t, 201, "PUT", victim.URL()+"/databases/db/docs?id=a&waitForReplicas=3", `{"v":1}`)
}

// TestNodeUnderAMembersTagWithAnotherDataDirectoryIsRefused: a node started
// under a member's tag with another data directory (an empty one, at the
// member's own addresses or at new ones) is refused at start, before raft
// hears of it: the member keeps its raft address and its record, and
// comes back with its own directory. Once the member is removed, an empty
// directory may take the tag.
func TestNodeUnderAMembersTagWithAnotherDataDirectoryIsRefused(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3})
	leader := c.Leader()
	L := c.URL(leader)
	victim := c.Members[1]
	if leader == 1 {
		victim = c.Members[2]
	}
	testcluster.Must(t, 201, "PUT", L+"/admin/databases/db", `{"Shards":2,"ReplicationFactor":2}`)
	testcluster.Must(t, 201, "PUT", L+"/databases/db/docs?id=users/1&waitForReplicas=2", `{"v":1}`)
	listed := func() string {
		r := testcluster.Must(t, 200, "GET", L+"/cluster", "")
		var view struct {
			Nodes []struct{ Tag, RaftAddr, Id string }
		}
		if err := json.Unmarshal(r.Body, &view); err != nil {
			t.Fatalf("GET /cluster: %v: %s", err, r.Body)
		}
		for _, m := range view.Nodes {
			if m.Tag == victim.Tag {
				return m.RaftAddr + " " + m.Id
			}
		}
		return ""
	}
	ownID, err := os.ReadFile(filepath.Join(victim.Dir, "NODE_ID"))
	if err != nil {
		t.Fatal(err)
	}
	before := listed()
	if want := fmt.Sprintf("127.0.0.1:%d %s", victim.RaftPort, strings.TrimSpace(string(ownID))); before != want {
		t.Fatalf("node %s listed as %q, want %q", victim.Tag, before, want)
	}
	victim.Stop()
	ports, err := freeport.Take(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, raftAddr := range []string{fmt.Sprintf("127.0.0.1:%d", victim.RaftPort), fmt.Sprintf("127.0.0.1:%d", ports[0])} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		dir := t.TempDir()
		err := victim.StartInProcess(ctx, func(cfg *config.Config) {
			cfg.Node.DataDir = dir
			cfg.Raft.Addr = raftAddr
		})
		cancel()
		if !errors.Is(err, node.ErrNodeIDConflict) {
			t.Fatalf("node %s with an empty data directory at raft %s: %v, want ErrNodeIDConflict", victim.Tag, raftAddr, err)
		}
		// Refused before raft listened: no member sent it the log.
		store, serr := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft", "raft.db")})
		if serr != nil {
			t.Fatal(serr)
		}
		last, serr := store.LastIndex()
		store.Close()
		if serr != nil || last != 0 {
			t.Fatalf("the refused node's raft log holds entries up to %d (%v): a member's log reached it", last, serr)
		}
		for _, want := range []string{strings.TrimSpace(string(ownID)), "DELETE /cluster/nodes/" + victim.Tag} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error does not name %q: %v", want, err)
			}
		}
		t.Logf("raft %s: refused after %v: %v", raftAddr, time.Since(start).Round(time.Millisecond), err)
		if after := listed(); after != before {
			t.Fatalf("after the refused start node %s is listed as %q, was %q", victim.Tag, after, before)
		}
	}
	victim.Start()
	testcluster.Must(t, 201, "PUT", victim.URL()+"/databases/db/docs?id=users/2&waitForReplicas=2", `{"v":2}`)
	testcluster.Must(t, 200, "GET", victim.URL()+"/databases/db/docs?id=users/1", "")

	// The member's data directory lost for good: remove it, and an empty
	// directory joins under its tag.
	victim.Stop()
	testcluster.Must(t, 204, "DELETE", L+"/cluster/nodes/"+victim.Tag, "")
	fresh := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := victim.StartInProcess(ctx, func(cfg *config.Config) { cfg.Node.DataDir = fresh }); err != nil {
		t.Fatalf("node %s with an empty data directory after its removal: %v", victim.Tag, err)
	}
	newID, err := os.ReadFile(filepath.Join(fresh, "NODE_ID"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := listed(), fmt.Sprintf("127.0.0.1:%d %s", victim.RaftPort, strings.TrimSpace(string(newID))); got != want {
		t.Fatalf("node %s listed as %q after it joined again, want %q", victim.Tag, got, want)
	}
	testcluster.Must(t, 201, "PUT", victim.URL()+"/databases/db/docs?id=users/3&waitForReplicas=2", `{"v":3}`)
}
