// Package systemtest holds multi-node tests: real nodes (in-process or
// child processes) started by testcluster, driven over HTTP.
package systemtest
