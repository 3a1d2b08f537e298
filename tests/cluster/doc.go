// Package cluster runs Lazarus clusters of three lazarus-node processes on
// 127.0.0.1 and one PostgreSQL server, and kills, pauses and restarts
// nodes under load. The test binary itself runs no cluster code (the nodes
// are separate processes, built without the race detector unless
// LAZARUS_NODE_RACE is set), so it runs with -race like every other
// package.
//
// The package has no library code; its tests are in _test.go files
// (package cluster_test).
package cluster
