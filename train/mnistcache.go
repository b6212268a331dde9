package train

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshtrain/meshtrain/train/mnistdata"
)

// The embedded MNIST files are gzip-compressed, and decompressing them is
// most of what starting a node costs: about 0.16 of 0.23 CPU-seconds on an
// idle machine. A machine that runs many nodes has little CPU to spare for
// each, and a node started there waited 10 to 20 s for those 0.16 s. So the
// first load on a machine keeps the decompressed files in the user's cache
// directory, and later loads read them back, checked against the size and
// CRC-32 that the embedded gzip file's trailer records for its contents. A
// cache file that is short, torn or altered is decompressed again and
// rewritten. With no cache directory (no $HOME, as in a FROM scratch image)
// or none that can be written, every load decompresses.

// MNISTCacheDir is where LoadMNIST keeps the decompressed embedded files:
// meshtrain/mnist in the user's cache directory ($XDG_CACHE_HOME, else
// ~/.cache, on Linux), or "" when the user has none.
func MNISTCacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "meshtrain", "mnist")
}

// staleTemp is the age after which a cache write's temporary file is taken
// to belong to a process that died writing it.
const staleTemp = time.Hour

// loadEmbeddedIDX reads the embedded file base.gz, whose data has expect
// bytes when good: from cacheDir when it holds a good copy, else by
// decompressing it, after which it leaves a copy there (cacheDir "": no
// cache). cached says which. A cache that cannot be read or written costs
// the decompression, never the load.
func loadEmbeddedIDX(cacheDir, base string, expect int64) (idx *IDX, cached bool, err error) {
	f, err := mnistdata.Open(base + ".gz")
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	var path string
	crc, size, terr := gzipTrailer(f)
	if cacheDir != "" && terr == nil {
		// The checksum in the name keeps a binary with other data from
		// taking this one's files.
		path = filepath.Join(cacheDir, fmt.Sprintf("%s-%08x", base, crc))
		if idx := readCachedIDX(path, crc, size); idx != nil {
			return idx, true, nil
		}
	}
	if idx, err = readIDX(f, 0, expect); err != nil {
		return nil, false, err
	}
	if path != "" {
		_ = writeCachedIDX(path, idx)
	}
	return idx, false, nil
}

// gzipTrailer returns the CRC-32 and the size (mod 2^32) of the
// uncompressed data that a single-member gzip file ends with.
func gzipTrailer(f fs.File) (crc, size uint32, err error) {
	st, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	ra, ok := f.(io.ReaderAt)
	if !ok || st.Size() < 18 { // a gzip header and trailer take 18 bytes
		return 0, 0, errors.New("no gzip trailer to read")
	}
	var b [8]byte
	if _, err := ra.ReadAt(b[:], st.Size()-8); err != nil {
		return 0, 0, err
	}
	return binary.LittleEndian.Uint32(b[:4]), binary.LittleEndian.Uint32(b[4:]), nil
}

// readCachedIDX returns the IDX array in the file at path if the file has
// the size and CRC-32 given, and nil otherwise. The size is checked before
// anything is read, so a file of any other size costs no memory. The
// array's data is the file's buffer: one read, no copy.
func readCachedIDX(path string, crc, size uint32) *IDX {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() != int64(size) {
		return nil
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil || crc32.ChecksumIEEE(b) != crc {
		return nil
	}
	r := bytes.NewReader(b)
	dims, n, err := readIDXHeader(r, MaxIDXBytes)
	if err != nil || int64(r.Len()) != n {
		return nil
	}
	return &IDX{Dims: dims, Data: b[len(b)-r.Len():]}
}

// writeCachedIDX writes idx to path through a temporary file renamed into
// place, so that a reader never sees a part of it, and removes temporary
// files that writers which died left behind.
func writeCachedIDX(path string, idx *IDX) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if old, err := os.ReadDir(dir); err == nil {
		for _, e := range old {
			if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".tmp") && time.Since(info.ModTime()) > staleTemp {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	err = WriteIDX(tmp, idx.Dims, idx.Data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}
