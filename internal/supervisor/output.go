package supervisor

import (
	"bytes"
	"io"

	"github.com/ipfailover/ipfailover/internal/keepalived"
)

// outputPipeSize is the capacity asked for each of keepalived's output
// pipes: the most an unprivileged process may ask for by default.
const outputPipeSize = 1 << 20

// outputChunk is how much of keepalived's output copyOutput holds at a
// time; a line longer than that is copied in pieces.
const outputChunk = 64 << 10

// copyOutput copies keepalived's output from r to w until r fails (at the
// end of the output, or at the deadline outputs.close sets), leaving out
// keepalived's notices of JSON dump signals (keepalived.IsDumpNotice).
// ipfailover asks for a dump at every readiness probe and scrape, and the
// notice keepalived logs for each one would fill the log with a line every
// few seconds. Every other byte passes unchanged and in order.
//
// It writes whole lines, at most one write per read from r. A line waits
// for its newline (keepalived writes each line with one write, the newline
// included); a line longer than outputChunk is written in pieces, and what
// is left at the end is written as it is. A writer that fails does not
// stop the copy: keepalived must never block on a full pipe.
func copyOutput(w io.Writer, r io.Reader) {
	buf := make([]byte, outputChunk)
	var (
		n       int  // bytes held in buf
		midLine bool // buf starts in the middle of a line written in pieces
		failed  bool // w failed: read on, write nothing
	)
	write := func(b []byte) {
		if len(b) > 0 && !failed {
			if _, err := w.Write(b); err != nil {
				failed = true
			}
		}
	}
	for {
		m, err := r.Read(buf[n:])
		n += m
		// Write the complete lines, in runs between the notices left out.
		start, next := 0, 0
		for {
			i := bytes.IndexByte(buf[next:n], '\n')
			if i < 0 {
				break
			}
			end := next + i + 1
			if !midLine && keepalived.IsDumpNotice(buf[next:end]) {
				write(buf[start:next])
				start = end
			}
			midLine = false
			next = end
		}
		write(buf[start:next])
		n = copy(buf, buf[next:n])
		if err != nil {
			if n > 0 && (midLine || !keepalived.IsDumpNotice(buf[:n])) {
				write(buf[:n])
			}
			return
		}
		if n == len(buf) {
			write(buf)
			n, midLine = 0, true
		}
	}
}
