package bench

import (
	"fmt"
	"os"
	"runtime/debug"
)

// resetPeakRSS returns the Go heap's free memory to the OS and resets the
// process's peak RSS (VmHWM) by writing 5 to /proc/self/clear_refs (Linux
// 4.0+). It reports whether the reset worked.
func resetPeakRSS() bool {
	debug.FreeOSMemory()
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// peakRSSMiB reads the process's peak resident set size (VmHWM), in MiB.
func peakRSSMiB() (float64, error) {
	kb, err := procField("/proc/self/status", "VmHWM")
	if err != nil {
		return 0, fmt.Errorf("read VmHWM from /proc/self/status: %w", err)
	}
	return float64(kb) / 1024, nil
}
