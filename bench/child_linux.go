package bench

import "syscall"

// childAttr makes the kernel kill a child when the benchmark dies (killed,
// or crashed), so that no node or ceiling outlives its run. The kernel
// sends the signal when the thread that started the child ends; Go ends a
// thread only when a goroutine locked to it exits, which the benchmark
// never does, so in practice it follows the process.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
