//go:build faults

package systemtest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// TestFaultMigrationSurvivesCutLinks cuts every link (raft, the NATS
// routes, node-to-node HTTP) between one node and the other two while a
// bucket migration is Moving, Moved, and between the ownership flip and
// the source cleanup: the node is the source's responsible node, a
// destination replica or the raft leader. Writers go on into the bucket
// through a node on the majority side and through the cut-off node. Once
// the others count the node down the links heal; then every move
// completes, every acknowledged write (those the cut-off node took before
// it knew, too) is on the destination, nothing is left on the source, the
// bucket is never migrated again, and the replicas converge.
//
// Run with: go test -tags faults ./systemtest -run Fault
func TestFaultMigrationSurvivesCutLinks(t *testing.T) {
	migrationFaults(t, testcluster.Options{CuttableLinks: true}, cutOff)
}

// cutOff cuts the victim off from the others, and heals the links a
// second after they counted it down.
var cutOff = migrationFault{
	verb:         "cutting off",
	victimWrites: true,
	disrupt:      func(c *testcluster.Cluster, victim int) { c.Isolate(victim) },
	restore: func(c *testcluster.Cluster, victim int) {
		time.Sleep(time.Second) // the cut lasts a while past that: the others act without it
		c.Heal()
	},
}

// TestFaultKilledWhileCutOff cuts a node (not the raft leader) off from
// the others on a cluster of processes, kills it with SIGKILL while it is
// cut off, heals the links and starts it again, all under If-Match
// increments with waitForReplicas=2 through every running node: no value
// is acknowledged twice, every counter ends at its acknowledged
// increments, and the replicas converge. (RF 2: while the node is cut
// off, the two shards it holds cannot have two copies of a write, and
// their increments answer 504 after waitForReplicasTimeout, 2 s here.)
func TestFaultKilledWhileCutOff(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Mode: testcluster.Processes, CuttableLinks: true})
	A := c.URL(0)
	testcluster.Must(t, 201, "PUT", A+"/admin/databases/db", `{"Shards":3,"ReplicationFactor":2}`)
	ctr := counterSet(t, A, "db", 6, "&waitForReplicas=2&waitForReplicasTimeout=2s")
	victim := (c.Leader() + 1) % 3
	up := newUpNodes(c)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	runClients(&wg, 8, 3, stop, func(rnd *rand.Rand) {
		ctr.increment(t, rnd, func() string { return up.pick(rnd) })
	})
	waitAcked(t, ctr, 20)
	c.Isolate(victim)
	via := c.URL((victim + 1) % 3)
	testcluster.WaitFor(t, 10*time.Second, c.Members[victim].Tag+" to be reported down", func() error {
		cl := testcluster.Must(t, 200, "GET", via+"/cluster", "").JSON(t)
		for _, n := range cl["Nodes"].([]any) {
			if nm := n.(map[string]any); nm["Tag"] == c.Members[victim].Tag && nm["Status"] == "Down" {
				return nil
			}
		}
		return fmt.Errorf("cluster view %v", cl["Nodes"])
	})
	// Shards with a replica on the cut-off node cannot have two copies:
	// only the third shard's counters move on.
	waitAcked(t, ctr, ctr.total()+5)
	t.Logf("killing %s while cut off, after %d increments", c.Members[victim].Tag, ctr.total())
	up.set(victim, false)
	c.Members[victim].Kill()
	c.Heal()
	c.Members[victim].Start()
	up.set(victim, true)
	t.Logf("%s restarted, after %d increments", c.Members[victim].Tag, ctr.total())
	waitAcked(t, ctr, ctr.total()+40)
	ctr.settle(t, c, stop, &wg)
}
