//go:build !linux

package bench

import "syscall"

// childAttr has nothing to add off Linux: a child outlives a benchmark
// that is killed, and must be stopped by hand.
func childAttr() *syscall.SysProcAttr { return nil }
