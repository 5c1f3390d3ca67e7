package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"

	"github.com/ipfailover/ipfailover/internal/keepalived"
	"github.com/ipfailover/ipfailover/test/wait"
)

const notice = "Wed Dec  2 10:18:53 2026: Printing VRRP as json for process(18) on signal\n"

// TestCopyOutput: the notices of dump signals are left out wherever they
// fall, however the reads cut the output; every other byte passes.
func TestCopyOutput(t *testing.T) {
	master := "Wed Dec  2 10:18:47 2026: (VIP_1) Entering MASTER STATE\n"
	long := strings.Repeat("x", outputChunk+10) + ": Printing VRRP as json for process(18) on signal\n"
	for _, tt := range []struct {
		name, in, want string
	}{
		{"only notices", notice + notice + notice, ""},
		{"between lines", master + notice + master + notice + notice + master, master + master + master},
		{"first and last", notice + master + notice, master},
		{"last without a newline", master + strings.TrimSuffix(notice, "\n"), master},
		{"other lines without a newline", master + "no newline at the end", master + "no newline at the end"},
		{"CRLF", master + strings.Replace(notice, "\n", "\r\n", 1), master},
		{"a line that quotes one", master + "quoted: \"" + notice, master + "quoted: \"" + notice},
		{"binary", "\x00\xff\n" + notice + "\xfe", "\x00\xff\n\xfe"},
		{"a long line ending like one", long + notice + master, long + master},
		{"empty", "", ""},
	} {
		for _, reader := range []struct {
			name string
			wrap func(io.Reader) io.Reader
		}{
			{"whole", func(r io.Reader) io.Reader { return r }},
			{"byte by byte", iotest.OneByteReader},
			{"halves", iotest.HalfReader},
		} {
			t.Run(tt.name+"/"+reader.name, func(t *testing.T) {
				var out bytes.Buffer
				copyOutput(&out, reader.wrap(strings.NewReader(tt.in)))
				if got := out.String(); got != tt.want {
					t.Errorf("copied %q,\nwant %q", abbreviate(got), abbreviate(tt.want))
				}
			})
		}
	}
}

func abbreviate(s string) string {
	if len(s) > 200 {
		return fmt.Sprintf("%s...(%d bytes)...%s", s[:80], len(s)-160, s[len(s)-80:])
	}
	return s
}

type failingWriter struct{ writes int }

func (w *failingWriter) Write([]byte) (int, error) {
	w.writes++
	return 0, errors.New("broken")
}

// TestCopyOutputReadsPastAFailedWriter: keepalived never blocks on its
// pipe because the writer failed.
func TestCopyOutputReadsPastAFailedWriter(t *testing.T) {
	in := strings.NewReader(strings.Repeat("Entering MASTER STATE\n", 100_000))
	w := &failingWriter{}
	copyOutput(w, in)
	if in.Len() != 0 {
		t.Errorf("%d bytes left unread", in.Len())
	}
	if w.writes != 1 {
		t.Errorf("%d writes after the writer failed, want 1 (the failed one)", w.writes-1)
	}
}

// TestDumpNoticesLeftOut: the fake keepalived, writing to a file as in a
// container, logs its start lines and then a notice for each dump signal
// (one per readiness probe, every 5 s for 30 s). The file holds the start
// lines, byte for byte, and no notice: nothing repeats.
func TestDumpNoticesLeftOut(t *testing.T) {
	f := newFake(t)
	start := "Wed Dec  2 10:18:44 2026: Starting Keepalived v2.2.7 (01/16,2022)\n" +
		"Wed Dec  2 10:18:47 2026: (VIP_1) Entering MASTER STATE\n"
	f.set("stderr", start)
	errOut, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errOut.Close()
	r, _ := startFake(t, f, func(o *Options) { o.Stderr = errOut })
	wait.For(t, "the fake to run", func() bool { return f.has(fmt.Sprintf("running %d", r.s.PID())) })
	pid := r.s.PID()
	const probes = 7 // at 0, 5, ... 30 s
	for i := 1; i <= probes; i++ {
		if err := syscall.Kill(pid, 36); err != nil {
			t.Fatal(err)
		}
		wait.For(t, fmt.Sprintf("dump %d", i), func() bool { return countEvents(f, fmt.Sprintf("dump %d", pid)) == i })
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(errOut.Name())
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != start {
		t.Errorf("keepalived's output after %d dumps:\n%s\nwant its start lines alone:\n%s", probes, got, start)
	}
}

func countEvents(f *fake, event string) int {
	n := 0
	for _, e := range f.events() {
		if e == event {
			n++
		}
	}
	return n
}

// FuzzCopyOutput: whatever keepalived writes, and however the reads cut it,
// the copy is the output without the lines IsDumpNotice matches.
func FuzzCopyOutput(f *testing.F) {
	f.Add([]byte(notice+"Entering MASTER STATE\n"+notice), uint8(0))
	f.Add([]byte("no newline"), uint8(1))
	f.Add([]byte("\n\n"+strings.TrimSuffix(notice, "\n")), uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, how uint8) {
		var want []byte
		for line := range bytes.Lines(in) {
			if !keepalived.IsDumpNotice(line) {
				want = append(want, line...)
			}
		}
		var r io.Reader = bytes.NewReader(in)
		switch how % 3 {
		case 1:
			r = iotest.OneByteReader(r)
		case 2:
			r = iotest.HalfReader(r)
		}
		var out bytes.Buffer
		copyOutput(&out, r)
		if !bytes.Equal(out.Bytes(), want) {
			t.Errorf("copied %q, want %q", out.Bytes(), want)
		}
	})
}
