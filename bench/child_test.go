package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardnode/shardnode/testcluster"
)

// TestChildProcessesRun runs the put, get, rss and reshard-small-buckets
// rows with the node, the HTTP ceilings and the resharding cluster's nodes
// as child processes of a built shardnode binary, as `shardnode bench`
// does by default: every row has figures, the rss row reads the node's
// process and not this one, the resharding row's cluster is of node
// processes and its CPU counts theirs, the node's CPU profile is written,
// and no child outlives the run.
func TestChildProcessesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds shardnode and starts it as a child process")
	}
	bin := testcluster.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	prof := filepath.Join(dir, "node.prof")
	var progress bytes.Buffer
	rep, err := Run(ctx, Options{
		Quick: true, Dir: dir, Progress: &progress, Binary: bin, NodeCPUProfile: prof,
		Workloads: []string{WorkloadPut, WorkloadGet, WorkloadRSS, WorkloadReshardSmall},
		Clients:   8, Records: 300, Ops: 300, RSSDocs: 300, ReshardBuckets: 5,
	})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	for _, want := range [][2]string{{"put", "shardnode"}, {"get", "shardnode"}, {"get", "go-http"}, {"get", "go-fasthttp"}, {"rss", "shardnode"}} {
		row, ok := rep.Row(want[0], want[1])
		if !ok || row.Error != "" || !row.Measured() || row.OpsPerSec <= 0 {
			t.Errorf("row %s/%s: %+v\n%s", want[0], want[1], row, progress.String())
		}
	}
	if !strings.Contains(rep.Target, "node process") || !strings.Contains(rep.Target, "HTTP ceilings: child processes") {
		t.Errorf("target does not say the node and the ceilings ran as processes: %q", rep.Target)
	}
	row, _ := rep.Row("rss", "shardnode")
	if row.PeakRSSMiB <= 0 || !strings.Contains(row.Note, "the node's process") {
		t.Errorf("rss row does not read the node's process: %+v", row)
	}
	if row, _ := rep.Row(WorkloadReshardSmall, "shardnode"); row.Reshard == nil || row.Reshard.DocumentsMoved <= 0 || row.Reshard.CPUCores <= 0 ||
		!strings.Contains(row.Note, "cluster of node processes") {
		t.Errorf("reshard-small-buckets row not measured on a cluster of node processes: %+v", row)
	}
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Errorf("node CPU profile not written: %v", err)
	}
	// Every child is gone: the node's pid, named in the target, no longer
	// exists.
	var pid int
	if _, err := fmt.Sscanf(rep.Target, "node process %d", &pid); err != nil {
		t.Fatalf("no pid in target %q: %v", rep.Target, err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("node process %d still runs after Run returned", pid)
	}
}
