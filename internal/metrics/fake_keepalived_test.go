package metrics

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// fakeKeepalivedEnv makes the test binary act as the fake keepalived instead of running tests.
const fakeKeepalivedEnv = "IPFAILOVER_TEST_FAKE_KEEPALIVED"

func TestMain(m *testing.M) {
	if os.Getenv(fakeKeepalivedEnv) == "1" {
		if err := fakeKeepalived(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "fake keepalived:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

// fakeKeepalived stands in for keepalived's JSON dump, for tests that run without root or
// keepalived. Arguments: SIGNAL FIXTURE DUMP COUNT. Once it handles SIGNAL it creates
// COUNT.ready; on every SIGNAL it appends a line to COUNT and copies FIXTURE over DUMP in place
// (truncate, then write), first writing half of it and pausing, so that readers meet a
// half-written dump. FIXTURE "ignore" counts the signal and writes nothing.
//
// It was a bash script once, and bash runs a trap for a signal that arrives between forking a
// background job and starting `wait` only after that job ends: dumps went missing under load.
// Real-time signals queue, and Notify hands over each one.
func fakeKeepalived(args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("want SIGNAL FIXTURE DUMP COUNT, got %q", args)
	}
	n, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	fixture, dump, count := args[1], args[2], args[3]
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, syscall.Signal(n))
	if err := os.WriteFile(count+".ready", []byte("ready\n"), 0o600); err != nil {
		return err
	}
	for range sigs {
		if err := appendLine(count, "signal"); err != nil {
			return err
		}
		if fixture == "ignore" {
			continue
		}
		b, err := os.ReadFile(fixture)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dump, b[:len(b)/2], 0o600); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
		if err := os.WriteFile(dump, b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
