package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Settings come from three places, strongest first: command-line flags,
// MESHTRAIN_* environment variables, and a YAML file (--config). All three
// use the flag names: the YAML key `avg-interval` and the variable
// MESHTRAIN_AVG_INTERVAL both set --avg-interval. Lists (--bootstrap,
// --listen) are YAML sequences, or comma-separated in a variable.

// envPrefix starts every environment variable meshtrain reads.
const envPrefix = "MESHTRAIN_"

// maxConfigFile bounds the YAML file read.
const maxConfigFile = 1 << 20

// envName is the environment variable for a flag.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applySettings fills every flag not given on the command line from the
// environment, then from the YAML file named by the "config" flag. It
// reports every bad key or value at once.
func applySettings(fs *flag.FlagSet, environ []string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, envPrefix) {
			env[k] = v
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || f.Name == "config" {
			return
		}
		v, ok := env[envName(f.Name)]
		if !ok {
			return
		}
		vals := []string{v}
		if _, isList := f.Value.(*listFlag); isList {
			vals = strings.Split(v, ",")
		}
		for _, x := range vals {
			if err := fs.Set(f.Name, strings.TrimSpace(x)); err != nil {
				errs = append(errs, fmt.Errorf("%s: invalid value %q: %v", envName(f.Name), x, err))
				_ = f.Value.Set(f.DefValue) // a failed Set may leave a zero behind
			}
		}
		set[f.Name] = true
	})
	if cf := fs.Lookup("config"); cf != nil && cf.Value.String() != "" {
		kv, err := readConfigFile(cf.Value.String())
		if err != nil {
			errs = append(errs, err)
		}
		keys := make([]string, 0, len(kv))
		for k := range kv {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			f := fs.Lookup(k)
			switch {
			case f == nil || k == "config":
				errs = append(errs, fmt.Errorf("config file %s: unknown key %q", cf.Value, k))
				continue
			case set[k]:
				continue
			}
			for _, x := range kv[k] {
				if err := fs.Set(k, x); err != nil {
					errs = append(errs, fmt.Errorf("config file %s: %s: invalid value %q: %v", cf.Value, k, x, err))
					_ = f.Value.Set(f.DefValue)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// readConfigFile reads a YAML mapping of flag names to scalars or lists of
// scalars.
func readConfigFile(path string) (map[string][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if len(b) > maxConfigFile {
		return nil, fmt.Errorf("config file %s: larger than %d bytes", path, maxConfigFile)
	}
	kv, err := parseConfig(b)
	if err != nil {
		// The keys that did parse are still checked, so every problem is
		// reported in one go.
		return kv, fmt.Errorf("config file %s: %w", path, err)
	}
	return kv, nil
}

// parseConfig decodes the YAML document.
func parseConfig(b []byte) (map[string][]string, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("not a YAML mapping: %w", err)
	}
	out := make(map[string][]string, len(doc))
	var errs []error
	for k, v := range doc {
		switch x := v.(type) {
		case []any:
			for _, item := range x {
				s, ok := scalar(item)
				if !ok {
					errs = append(errs, fmt.Errorf("%s: list items must be plain values", k))
					break
				}
				out[k] = append(out[k], s)
			}
		default:
			s, ok := scalar(x)
			if !ok {
				errs = append(errs, fmt.Errorf("%s: must be a plain value or a list", k))
				continue
			}
			out[k] = []string{s}
		}
	}
	return out, errors.Join(errs...)
}

func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool, int, int64, uint64, float64:
		return fmt.Sprint(x), true
	case nil:
		return "", true
	}
	return "", false
}
