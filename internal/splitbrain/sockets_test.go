package splitbrain

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// stamp is a control message as the kernel passes SO_TIMESTAMPNS: level,
// type and a timespec.
func stamp(level, typ int32, at time.Time, data int) []byte {
	ts := make([]byte, 16)
	binary.NativeEndian.PutUint64(ts[0:8], uint64(at.Unix()))
	binary.NativeEndian.PutUint64(ts[8:16], uint64(at.Nanosecond()))
	b := make([]byte, unix.CmsgSpace(data))
	binary.NativeEndian.PutUint64(b[0:8], uint64(unix.CmsgLen(data)))
	binary.NativeEndian.PutUint32(b[8:12], uint32(level))
	binary.NativeEndian.PutUint32(b[12:16], uint32(typ))
	copy(b[unix.CmsgLen(0):], ts[:min(data, 16)])
	return b
}

// TestArrival: an advert is timed by the kernel's stamp when the stamp is
// well formed and believable, else by the time it was read; the result
// keeps the read time's monotonic reading.
func TestArrival(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration) time.Time { return now.Round(0).Add(-d) }
	for _, tt := range []struct {
		name string
		oob  []byte
		want time.Duration // before now
	}{
		{"no control message", nil, 0},
		{"a stamp 30 ms old", stamp(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ago(30*time.Millisecond), 16), 30 * time.Millisecond},
		{"a stamp of now", stamp(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ago(0), 16), 0},
		{"a stamp in the future", stamp(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ago(-time.Second), 16), 0},
		{"a stamp older than believed", stamp(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ago(maxArrivalAge+time.Second), 16), 0},
		{"a truncated stamp", stamp(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ago(30*time.Millisecond), 8), 0},
		{"another message", stamp(unix.SOL_SOCKET, unix.SCM_RIGHTS, ago(30*time.Millisecond), 16), 0},
		{"another level", stamp(unix.IPPROTO_IP, unix.SCM_TIMESTAMPNS, ago(30*time.Millisecond), 16), 0},
		{"a cut header", stamp(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ago(30*time.Millisecond), 16)[:10], 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := arrival(tt.oob, now)
			if d := now.Sub(got); d != tt.want {
				t.Errorf("arrival %s before it was read, want %s", d, tt.want)
			}
			if !strings.Contains(got.String(), " m=") {
				t.Errorf("arrival %v lost the monotonic reading", got)
			}
		})
	}
	// Bad nanoseconds.
	b := stamp(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ago(30*time.Millisecond), 16)
	binary.NativeEndian.PutUint64(b[unix.CmsgLen(0)+8:], uint64(1e9))
	if got := arrival(b, now); !got.Equal(now) {
		t.Errorf("a stamp with 1e9 ns: arrival %v, want the read time", got)
	}
}

// TestStripIPv4: the payload of an IPv4 packet read with its header;
// anything else is refused.
func TestStripIPv4(t *testing.T) {
	hdr := func(ihl byte, n int) []byte {
		b := make([]byte, n)
		b[0] = 0x40 | ihl
		for i := int(ihl) * 4; i < n; i++ {
			b[i] = byte(i)
		}
		return b
	}
	for _, tt := range []struct {
		name string
		b    []byte
		want int
	}{
		{"a 20-byte header and 8 bytes", hdr(5, 28), 8},
		{"a 24-byte header (options) and 8 bytes", hdr(6, 32), 8},
		{"a header only", hdr(5, 20), 0},
		{"short of a header", hdr(5, 19), -1},
		{"a header length under 20", hdr(4, 28), -1},
		{"a header length past the packet", hdr(15, 40), -1},
		{"IPv6", append([]byte{0x60}, make([]byte, 40)...), -1},
		{"empty", nil, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ihl := 0
			if len(tt.b) > 0 {
				ihl = int(tt.b[0]&0x0f) * 4
			}
			got := stripIPv4(tt.b)
			if got != tt.want {
				t.Fatalf("stripIPv4 = %d, want %d", got, tt.want)
			}
			for i := range got {
				if tt.b[i] != byte(ihl+i) {
					t.Fatalf("payload byte %d is %d, want %d", i, tt.b[i], ihl+i)
				}
			}
		})
	}
}
