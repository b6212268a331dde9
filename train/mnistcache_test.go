package train

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// cacheFiles lists the names in dir.
func cacheFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// The first load of an embedded file decompresses it and leaves a copy in
// the cache (creating the directory); the next load reads the copy and gets
// the same array.
func TestMNISTCacheRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meshtrain", "mnist")
	for _, f := range []struct {
		base string
		size int64
	}{{mnistTestImages, MNISTTestSize * MNISTDim}, {mnistTestLabels, MNISTTestSize}} {
		first, cached, err := loadEmbeddedIDX(dir, f.base, f.size)
		if err != nil || cached {
			t.Fatalf("%s: first load: cached %v, %v", f.base, cached, err)
		}
		second, cached, err := loadEmbeddedIDX(dir, f.base, f.size)
		if err != nil || !cached {
			t.Fatalf("%s: second load: cached %v, %v", f.base, cached, err)
		}
		if int64(len(first.Data)) != f.size || !slices.Equal(first.Dims, second.Dims) || !bytes.Equal(first.Data, second.Data) {
			t.Fatalf("%s: the cached copy reads as dims %v, %d bytes; decompressed: %v, %d bytes", f.base,
				second.Dims, len(second.Data), first.Dims, len(first.Data))
		}
	}
	names := cacheFiles(t, dir)
	if len(names) != 2 {
		t.Fatalf("cache holds %v, want the two files and nothing else", names)
	}
	for _, n := range names {
		if !strings.HasPrefix(n, mnistTestImages+"-") && !strings.HasPrefix(n, mnistTestLabels+"-") {
			t.Fatalf("cache file %q", n)
		}
	}
}

// A cache file that is torn, altered or longer than the original is not
// used: the load decompresses, gets the original data, and repairs the file.
func TestMNISTCacheRejectsBadCopies(t *testing.T) {
	dir := t.TempDir()
	base, size := mnistTestLabels, int64(MNISTTestSize)
	want, _, err := loadEmbeddedIDX("", base, size)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadEmbeddedIDX(dir, base, size); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, cacheFiles(t, dir)[0])
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte {
		b := slices.Clone(good)
		b[i] ^= 1
		return b
	}
	for name, bad := range map[string][]byte{
		"empty":             {},
		"truncated":         good[:len(good)-1],
		"one label changed": flip(len(good) / 2),
		"header changed":    flip(3),
		"a byte too many":   append(slices.Clone(good), 0),
	} {
		if err := os.WriteFile(path, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		got, cached, err := loadEmbeddedIDX(dir, base, size)
		if err != nil || cached {
			t.Fatalf("%s: cached %v, %v", name, cached, err)
		}
		if !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("%s: the load returned other data", name)
		}
		if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, good) {
			t.Fatalf("%s: the cache file was not repaired (%v)", name, err)
		}
	}
}

// No cache, or one that cannot be written (its directory is a file), costs
// the decompression, never the load; a user with no home has no cache.
func TestMNISTCacheUnwritable(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"", filepath.Join(blocker, "mnist")} {
		got, cached, err := loadEmbeddedIDX(dir, mnistTestLabels, MNISTTestSize)
		if err != nil || cached || len(got.Data) != MNISTTestSize {
			t.Fatalf("cache %q: cached %v, %v", dir, cached, err)
		}
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	if d := MNISTCacheDir(); d != "" {
		t.Fatalf("no home, cache dir %q", d)
	}
}

// A temporary file that a writer which died left behind is removed by the
// next write; a recent one, which a writer may still be writing, is not.
func TestMNISTCacheRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	stale, recent := filepath.Join(dir, "a.1.tmp"), filepath.Join(dir, "a.2.tmp")
	for _, p := range []string{stale, recent} {
		if err := os.WriteFile(p, []byte("part"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleTemp)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadEmbeddedIDX(dir, mnistTestLabels, MNISTTestSize); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale temporary file: %v", err)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Fatalf("recent temporary file: %v", err)
	}
}

// LoadMNIST's embedded files go through the cache in MNISTCacheDir.
func TestLoadMNISTFillsTheCache(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	d, err := loadMNISTPair("", mnistTestImages, mnistTestLabels, MNISTTestSize)
	if err != nil {
		t.Fatal(err)
	}
	if d.N != MNISTTestSize {
		t.Fatalf("%d samples", d.N)
	}
	if names := cacheFiles(t, MNISTCacheDir()); len(names) != 2 {
		t.Fatalf("cache holds %v, want the test set's two files", names)
	}
	again, err := loadMNISTPair("", mnistTestImages, mnistTestLabels, MNISTTestSize)
	if err != nil || !bytes.Equal(again.Pix, d.Pix) || !bytes.Equal(again.Y, d.Y) {
		t.Fatalf("second load from the cache differs (%v)", err)
	}
}

// The training images, the bulk of a node's start: decompressed from the
// embedded file, and read back from the cache.
func BenchmarkLoadEmbeddedTrainImages(b *testing.B) {
	dir := b.TempDir()
	for _, c := range []struct {
		name  string
		cache string
	}{{"decompress", ""}, {"cached", dir}} {
		b.Run(c.name, func(b *testing.B) {
			if _, _, err := loadEmbeddedIDX(c.cache, mnistTrainImages, MNISTTrainSize*MNISTDim); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, _, err := loadEmbeddedIDX(c.cache, mnistTrainImages, MNISTTrainSize*MNISTDim); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
