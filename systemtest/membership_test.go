package systemtest

import (
	"fmt"
	"testing"
	"time"

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
