package bench

import (
	"fmt"
	"os"
	"runtime/debug"
)

// procDir is /proc's directory of process pid, 0 meaning this one.
func procDir(pid int) string {
	if pid == 0 {
		return "/proc/self"
	}
	return fmt.Sprintf("/proc/%d", pid)
}

// resetPeakRSS resets the peak RSS (VmHWM) of process pid (0: this one,
// which first returns the Go heap's free memory to the OS) by writing 5
// to its clear_refs (Linux 4.0+). It reports whether the reset worked.
func resetPeakRSS(pid int) bool {
	if pid == 0 {
		debug.FreeOSMemory()
	}
	return os.WriteFile(procDir(pid)+"/clear_refs", []byte("5"), 0) == nil
}

// peakRSSMiB reads the peak resident set size (VmHWM) of process pid (0:
// this one), in MiB.
func peakRSSMiB(pid int) (float64, error) {
	path := procDir(pid) + "/status"
	kb, err := procField(path, "VmHWM")
	if err != nil {
		return 0, fmt.Errorf("read VmHWM from %s: %w", path, err)
	}
	return float64(kb) / 1024, nil
}
