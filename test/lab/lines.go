package lab

import (
	"errors"
	"io"
	"slices"
	"sync"
)

// PrefixWriter returns a writer that copies whole lines to w, each with
// prefix. Writers that share mu never interleave their lines mid-line.
func PrefixWriter(w io.Writer, mu *sync.Mutex, prefix string) io.Writer {
	return LineWriter(mu, func(line []byte) error {
		_, err := io.WriteString(w, prefix+string(line))
		return err
	})
}

// LineWriter returns a writer that gathers what is written into lines and
// calls emit with each whole line, newline included, holding mu.
func LineWriter(mu *sync.Mutex, emit func(line []byte) error) io.Writer {
	return &lineWriter{mu: mu, emit: emit}
}

type lineWriter struct {
	mu      *sync.Mutex
	emit    func(line []byte) error
	partial []byte
}

func (l *lineWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, b...)
	for {
		i := slices.Index(l.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		if err := l.emit(l.partial[:i+1]); err != nil {
			return len(b), err
		}
		l.partial = l.partial[i+1:]
	}
}

// errNoVIPs keeps StartAll honest: waiting for nothing is a caller bug.
var errNoVIPs = errors.New("lab: no VIPs to wait for")
