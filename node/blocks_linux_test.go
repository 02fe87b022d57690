package node

import (
	"os"
	"syscall"
)

// blocksOf is the disk space a file takes (preallocated blocks included).
func blocksOf(st os.FileInfo) int64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Blocks * 512
	}
	return st.Size()
}
