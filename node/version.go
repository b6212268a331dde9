package node

import "runtime/debug"

// version is set at link time by the Makefile
// (-X github.com/meshtrain/meshtrain/node.version=...).
var version = ""

// Version is the release this binary was built from: the link-time value,
// else the module version recorded by `go install`, else "dev".
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// AgentVersion is what libp2p's identify protocol tells other peers.
func AgentVersion() string { return "meshtrain/" + Version() }
