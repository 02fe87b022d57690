package main

import "testing"

// TestSchedulerProcs: node.max-procs wins, then the GOMAXPROCS
// environment variable (left as Go applied it), then four per CPU.
func TestSchedulerProcs(t *testing.T) {
	for _, c := range []struct {
		setting int64
		env     string
		cpus    int
		want    int
	}{
		{0, "", 2, 8},
		{0, "", 1, 4},
		{0, "", 0, 4},
		{3, "", 2, 3},
		{3, "6", 2, 3},
		{0, "6", 2, 0},
	} {
		if got := schedulerProcs(c.setting, c.env, c.cpus); got != c.want {
			t.Errorf("schedulerProcs(%d, %q, %d) = %d, want %d", c.setting, c.env, c.cpus, got, c.want)
		}
	}
}
