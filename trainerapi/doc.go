// Package trainerapi is the node's local trainer API (docs/protocol.md,
// "Local trainer API"): a trainer process on the same machine, in any
// language, trains its own model at its own pace and hands the node
// snapshots over a Unix socket; the node gossips, merges and checkpoints
// around it and answers each snapshot with the merges since the last one,
// as a delta the trainer adds to its parameters.
//
// External is the node.Trainer that mirrors the external model; Server
// speaks the protocol on a listener and binds one trainer at a time to it.
package trainerapi
