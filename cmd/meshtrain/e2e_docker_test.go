//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The docker-compose swarm, as `make testnet` runs it: a FROM scratch image
// around the static binary, nodes that find each other by mDNS on the
// compose network. Three containers must each report 2 peers and at least
// one merge through their REST APIs; then everything is torn down.
func TestE2EDockerComposeSmoke(t *testing.T) {
	for _, tool := range []string{"docker", "docker-compose"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed for the compose smoke test: %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	run := func(name string, args ...string) {
		t.Helper()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	// The image is built from a context holding only the binary.
	build := t.TempDir()
	if err := os.MkdirAll(filepath.Join(build, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(build, "bin", "meshtrain"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	dockerfile, _ := filepath.Abs("../../testnet/Dockerfile")
	compose, _ := filepath.Abs("../../testnet/docker-compose.yml")
	run("docker", "build", "-q", "-f", dockerfile, "-t", "meshtrain:local", build)

	project := fmt.Sprintf("meshtrain-smoke-%d", os.Getpid())
	base := []string{"-f", compose, "-p", project}
	t.Cleanup(func() {
		out, err := exec.Command("docker-compose", append(base, "down", "-v", "--remove-orphans")...).CombinedOutput()
		if err != nil {
			t.Logf("compose down: %v\n%s", err, out)
		}
	})
	run("docker-compose", append(base, "up", "-d", "node0", "node1", "node2")...)

	ports := []string{"8081", "8082", "8083"}
	type status struct {
		PeerID string `json:"peer_id"`
		Peers  int    `json:"peers"`
		Merges int64  `json:"merges"`
		Step   int64  `json:"step"`
	}
	last := make([]status, len(ports))
	deadline := time.Now().Add(4 * time.Minute)
	for {
		ok := 0
		for i, p := range ports {
			resp, err := http.Get("http://127.0.0.1:" + p + "/v1/status")
			if err != nil {
				continue
			}
			var s status
			err = json.NewDecoder(resp.Body).Decode(&s)
			resp.Body.Close()
			if err != nil {
				continue
			}
			last[i] = s
			if s.Peers == 2 && s.Merges >= 1 {
				ok++
			}
		}
		if ok == len(ports) {
			break
		}
		if time.Now().After(deadline) {
			logs, _ := exec.Command("docker-compose", append(base, "logs", "--tail", "20")...).CombinedOutput()
			t.Fatalf("not every node reports 2 peers and a merge: %+v\n%s", last, logs)
		}
		time.Sleep(2 * time.Second)
	}
	for i, s := range last {
		t.Logf("container node%d: peer %s, %d peers, %d merges, step %d", i, s.PeerID, s.Peers, s.Merges, s.Step)
	}
}
