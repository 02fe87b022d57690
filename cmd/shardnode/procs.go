package main

import (
	"log/slog"
	"os"
	"runtime"
)

// procsPerCPU is how many goroutines serve lets run at once per CPU
// (GOMAXPROCS) by default.
//
// Why more than one: a node's goroutines block in the kernel, and in C,
// all the time: every durable commit's fdatasync (milliseconds here),
// reads of files not in the page cache, Pebble's block cache allocations
// (cgo). A goroutine blocked there keeps its scheduler slot until Go's
// monitor takes the slot back, and the goroutines queued behind it wait
// even though the CPU is free; with a few slots more than CPUs, the
// kernel runs whichever thread is ready. Measured with `shardnode serve`
// in its own process under `shardnode bench --url`, 2 CPUs, five runs
// each alternating: PUT median 10.9k ops/s at 2 slots, 14.9k at 4,
// 15.2k at 8; GET 25.9k, 29.5k, 31.3k; bulk 68.8k, 72.8k, 73.7k docs/s,
// with lower p99s (see docs/benchmarks.md, session 17).
const procsPerCPU = 4

// schedulerProcs returns the GOMAXPROCS serve runs with: setting
// (node.max-procs) when positive; else none (0: leave Go's) when the
// GOMAXPROCS environment variable is set (env), which Go already
// applied; else procsPerCPU per CPU Go found (cpus, its default
// GOMAXPROCS, which follows a container's CPU limit).
func schedulerProcs(setting int64, env string, cpus int) int {
	switch {
	case setting > 0:
		return int(setting)
	case env != "":
		return 0
	default:
		return procsPerCPU * max(cpus, 1)
	}
}

// setSchedulerProcs applies schedulerProcs to this process and logs it.
func setSchedulerProcs(setting int64, logger *slog.Logger) {
	cpus := runtime.GOMAXPROCS(0)
	procs := schedulerProcs(setting, os.Getenv("GOMAXPROCS"), cpus)
	if procs > 0 {
		runtime.GOMAXPROCS(procs)
	}
	logger.Info("scheduler", "gomaxprocs", runtime.GOMAXPROCS(0), "cpus", runtime.NumCPU())
}
