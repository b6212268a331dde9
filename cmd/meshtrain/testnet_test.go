package main

import (
	"strings"
	"testing"
)

// Bad churn and duration flags fail before any node starts, each with a
// clear message, and all of them at once.
func TestTestnetUpBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--churn", "fast"}, `--churn: testnet: "fast": want a number (0.2) or a percentage (20%)`},
		{[]string{"--churn", "-20%"}, "churn rate -0.2 not in [0,10]"},
		{[]string{"--churn", "1001%"}, "churn rate 10.01 not in [0,10]"},
		{[]string{"--churn", "0.2", "--never-return", "130%"}, "never-return share 1.3 not in [0,1]"},
		{[]string{"--never-return", "some"}, `--never-return: testnet: "some"`},
		{[]string{"--churn", "0.2", "--churn-grace", "-1s"}, "churn grace -1s: must be >= 0"},
		{[]string{"--churn", "0.2", "--nodes", "1"}, "churn needs at least 2 nodes"},
		{[]string{"--churn", "0.2", "--detach"}, "churn runs in this process: it cannot outlive it (no --detach)"},
		{[]string{"--duration", "-1m"}, "--duration -1m0s: must be >= 0"},
		{[]string{"--duration", "10m", "--detach"}, "--duration needs this process to stop the nodes: not with --detach"},
		{[]string{"--duration", "ten"}, `invalid value "ten" for flag -duration`},
		{[]string{"--min-session", "0s"}, "--min-session 0s: must be > 0"},
		{[]string{"--target", "0"}, "--target 0: must be > 0"},
		{[]string{"--target", "120%"}, "target accuracy 1.2 not in (0,1]"},
		{[]string{"--nodes", "257"}, "--nodes 257 not in [1,256]"},
	} {
		code, out, errOut := run(t, append([]string{"testnet", "up", "--dir", dir}, c.args...)...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and one line with %q", c.args, code, out, errOut, exitUsage, c.want)
		}
	}
	code, _, errOut := run(t, "testnet", "up", "--dir", dir, "--churn", "-1", "--never-return", "2", "--duration", "-1s", "--min-session", "-1s")
	for _, want := range []string{"churn rate -1", "never-return share 2", "--duration -1s", "--min-session -1s"} {
		if code != exitUsage || !strings.Contains(errOut, want) {
			t.Errorf("all bad at once: exit %d, %q lacks %q", code, errOut, want)
		}
	}
}
