// Package syncbuf is a bytes.Buffer that goroutines may write and read at
// once: the log or console output a test collects while the code under
// test still writes.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer collects what is written to it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the lines written so far that contain substr.
func (b *Buffer) Lines(substr string) []string {
	var out []string
	for line := range strings.SplitSeq(b.String(), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}
