//go:build faults

package systemtest

import (
	"testing"

	"github.com/shardnode/shardnode/testcluster"
)

// TestFaultRestartedReplicaWaitsForItsPeers: TestIncrementsAcrossCleanRestarts
// with real processes stopped by SIGTERM. A restarted node's replicas may
// open just after the node became ready; until their catch-up asked the
// other member how far it got, they took If-Match writes on the versions
// they held, though that member had taken newer ones meanwhile (an
// explorer: increments acknowledged twice after each restart).
func TestFaultRestartedReplicaWaitsForItsPeers(t *testing.T) {
	incrementsAcrossRestarts(t, testcluster.Processes, 6)
}
