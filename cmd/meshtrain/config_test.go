package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func settingsFlags(t *testing.T, file string) (*flag.FlagSet, *int, *float64, *listFlag) {
	t.Helper()
	fs := newFlags(&env{name: "t"}, "")
	batch := fs.Int("batch", 64, "")
	lr := fs.Float64("lr", 0.1, "")
	var boot listFlag
	fs.Var(&boot, "bootstrap", "")
	fs.String("config", file, "")
	return fs, batch, lr, &boot
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSettingsPrecedence(t *testing.T) {
	file := writeFile(t, "batch: 32\nlr: 0.5\nbootstrap:\n  - /a\n  - /b\n")
	fs, batch, lr, boot := settingsFlags(t, file)
	if err := fs.Parse([]string{"--lr", "0.25"}); err != nil {
		t.Fatal(err)
	}
	if err := applySettings(fs, []string{"MESHTRAIN_BATCH=16", "PATH=/bin", "MESHTRAIN_UNRELATED=1"}); err != nil {
		t.Fatal(err)
	}
	// flag beats env beats file; the file fills what nothing else set.
	if *lr != 0.25 || *batch != 16 || strings.Join(*boot, " ") != "/a /b" {
		t.Fatalf("lr %v batch %d bootstrap %v", *lr, *batch, *boot)
	}
	fs, batch, _, boot = settingsFlags(t, file)
	_ = fs.Parse(nil)
	if err := applySettings(fs, []string{"MESHTRAIN_BOOTSTRAP=/x, /y"}); err != nil {
		t.Fatal(err)
	}
	if *batch != 32 || strings.Join(*boot, " ") != "/x /y" {
		t.Fatalf("batch %d bootstrap %v", *batch, *boot)
	}
}

func TestSettingsReportEveryError(t *testing.T) {
	file := writeFile(t, "batch: many\nnope: 1\nlr: [1, [2]]\n")
	fs, batch, _, _ := settingsFlags(t, file)
	_ = fs.Parse(nil)
	err := applySettings(fs, []string{"MESHTRAIN_LR=fast"})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`MESHTRAIN_LR: invalid value "fast"`, `batch: invalid value "many"`, `unknown key "nope"`, "lr: list items"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if *batch != 64 {
		t.Errorf("a bad value left batch at %d, not its default", *batch)
	}
}

func TestSettingsBadFiles(t *testing.T) {
	for name, text := range map[string]string{
		"not a mapping": "- a\n- b\n",
		"broken yaml":   "a: [\n",
		"nested":        "lr: {a: 1}\n",
	} {
		fs, _, _, _ := settingsFlags(t, writeFile(t, text))
		_ = fs.Parse(nil)
		if err := applySettings(fs, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	fs, _, _, _ := settingsFlags(t, filepath.Join(t.TempDir(), "missing.yaml"))
	_ = fs.Parse(nil)
	if err := applySettings(fs, nil); err == nil {
		t.Error("missing file accepted")
	}
	big := writeFile(t, "lr: 1\n#"+strings.Repeat("x", maxConfigFile))
	fs, _, _, _ = settingsFlags(t, big)
	_ = fs.Parse(nil)
	if err := applySettings(fs, nil); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversized file: %v", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("lr: 0.1\nbootstrap: [/a, /b]\n"))
	f.Add([]byte("a: {b: c}\n"))
	f.Add([]byte("- x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		kv, err := parseConfig(b)
		if err != nil {
			return
		}
		// Whatever parses must be applicable without panicking.
		fs := newFlags(&env{name: "t"}, "")
		for k := range kv {
			if k == "" || strings.HasPrefix(k, "-") || strings.Contains(k, "=") {
				delete(kv, k) // not a flag name; applySettings reports it unknown
				continue
			}
			fs.String(k, "", "")
		}
		for k, vs := range kv {
			for _, v := range vs {
				if err := fs.Set(k, v); err != nil {
					t.Fatalf("string flag refused %q: %v", v, err)
				}
			}
		}
	})
}
