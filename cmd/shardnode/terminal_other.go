//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

import (
	"os"
	"strconv"
)

// terminalWidth returns the width in columns of the terminal f writes to
// ($COLUMNS, or 80), and false if f is not a character device.
func terminalWidth(f *os.File) (int, bool) {
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return 0, false
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n, true
	}
	return 80, true
}
