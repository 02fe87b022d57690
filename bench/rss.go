package bench

import (
	"fmt"
	"os"
	"runtime/debug"
)

// resetPeakRSS resets the peak RSS of the process pid (0: this one) and
// reports whether that worked; for this process it first returns the Go
// heap's free memory to the OS.
func resetPeakRSSOf(pid int) bool {
	if pid == 0 {
		return resetPeakRSS()
	}
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
}

// peakRSSMiBOf reads the peak RSS of the process pid (0: this one), in MiB.
func peakRSSMiBOf(pid int) (float64, error) {
	if pid == 0 {
		return peakRSSMiB()
	}
	path := fmt.Sprintf("/proc/%d/status", pid)
	kb, err := procField(path, "VmHWM")
	if err != nil {
		return 0, fmt.Errorf("read VmHWM from %s: %w", path, err)
	}
	return float64(kb) / 1024, nil
}

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
